"""The models a finished run offers: the base model and each saved checkpoint, one base in memory.

After training, Try, Compare and export ask for "the base model" or "step 40". A LoRA run's
checkpoints are small adapters over the same base weights, so `ModelVariants` loads the base once
and switches adapters on it (the base itself is the model with adapters off, as the reference
model is during training): trying five checkpoints costs five adapters, not five models. A
full-fine-tuning run's checkpoint is a whole model, loaded one at a time (the previous is freed).

    with ModelVariants(cfg, "runs/demo") as mv:
        with mv.use("latest") as model:             # or "base", "40", "step-40", a Variant
            ...generate_completions(model, mv.tokenizer, ...)

Loading is for generation only: no reference copy, no master weights, gradients off.
Try it:  python -c "from grpo_desktop.engine.variants.run_variants import run_variants as r; \\
print(r('runs/demo'))"
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.models.loading import Policy, load_policy
from grpo_desktop.engine.models.remote_code import RemoteCodePermission
from grpo_desktop.engine.ops.adapters import adapters_off
from grpo_desktop.engine.ops.host_memory import collect_cycles
from grpo_desktop.engine.runs import checkpoint as ckpt
from grpo_desktop.engine.runs.layout import list_checkpoints
from grpo_desktop.engine.variants.trl_models import is_trl_output, trl_variants
from grpo_desktop.engine.variants.variant import BASE, BASE_VARIANT, Variant


def run_variants(run_dir: str | None) -> list[Variant]:
    """The base model, then every whole checkpoint of the run, oldest first (a TRL output_dir:
    its checkpoint-N folders, then its final model; engine/variants/trl_models.py)."""
    found = [BASE_VARIANT]
    if not run_dir or not os.path.isdir(run_dir):
        return found
    if is_trl_output(run_dir):  # a TRL output_dir: checkpoint-N/ and the final model
        return found + trl_variants(run_dir)
    for step, folder in list_checkpoints(run_dir):
        weights, is_adapter = ckpt.weights_path(folder)
        if os.path.isdir(weights):
            found.append(Variant(f"step-{step}", f"Step {step}", step, weights, is_adapter))
    return found


def find_variant(variants: list[Variant], spec: str | Variant) -> Variant:
    """The variant `spec` names: a Variant, "base", "latest" (the newest checkpoint, or the base
    when there is none), a step number "40" or "step-40". UserError names the choices."""
    if isinstance(spec, Variant):
        return spec
    text = str(spec).strip().lower()
    if text == BASE:
        return variants[0]
    if text == "latest":
        return variants[-1]
    for v in variants:
        if v.key == text:  # e.g. "final" (a TRL output's final model)
            return v
    number = text[5:] if text.startswith("step-") else text
    if number.isdigit():
        for v in variants:
            if v.step == int(number):
                return v
    steps = [str(v.step) for v in variants if v.step is not None]
    choices = "base" + (", latest, or a step: " + ", ".join(steps) if steps else "")
    if not steps:
        choices += " (this run has saved no checkpoint yet)"
    raise UserError(f"There is no checkpoint '{spec}' in this run. Choose {choices}.")


class ModelVariants:
    """One base model in memory; `use(variant)` makes that variant the active model."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | None,
        *,
        remote_code: RemoteCodePermission | None = None,
        variants: list[Variant] | None = None,
    ) -> None:
        self.cfg = cfg.replace(algorithm={"beta": 0.0})  # no reference copy: "base" is one
        self.run_dir = run_dir
        self.variants = variants if variants is not None else run_variants(run_dir)
        self.remote_code = remote_code
        self._loaded: set[str] = set()  # adapter names on the peft model
        self._full: tuple[str, Policy] | None = None  # the one full-weights checkpoint loaded
        first = next((v for v in self.variants if v.is_adapter), None)
        # A LoRA run: the base wrapped by peft (its fresh "default" adapter is replaced by the
        # first checkpoint's), the other checkpoints' adapters added on first use.
        cfg_base = self.cfg.replace(lora={"enabled": first is not None})
        self.base: Policy = load_policy(cfg_base, remote_code=remote_code, for_inference=True)
        if first is not None:
            self._rename_first(first.key)
        _freeze(self.base.model)

    @property
    def tokenizer(self):
        return self.base.tokenizer

    @property
    def device(self) -> torch.device:
        return self.base.device

    def find(self, spec: str | Variant) -> Variant:
        return find_variant(self.variants, spec)

    def _rename_first(self, key: str) -> None:
        """peft names the first adapter "default"; keep it under the variant's key instead, so
        every adapter is addressed the same way."""
        model = self.base.model
        model.load_adapter(self.variants_by_key()[key].weights, adapter_name=key)
        model.set_adapter(key)
        model.delete_adapter("default")
        self._loaded.add(key)
        _freeze(model)

    def variants_by_key(self) -> dict[str, Variant]:
        return {v.key: v for v in self.variants}

    @contextlib.contextmanager
    def use(self, spec: str | Variant) -> Iterator[torch.nn.Module]:
        """The model with `spec` active, for the duration of the block (not re-entrant)."""
        variant = self.find(spec)
        if variant.weights is None:  # the base model
            model = self.base.model
            if self.base.uses_lora:
                with adapters_off(model):
                    yield model
            else:
                yield model
            return
        if variant.is_adapter:
            if not self.base.uses_lora:
                raise UserError(f"{variant.label} is a LoRA adapter, but this run has no base.")
            model = self.base.model
            if variant.key not in self._loaded:
                model.load_adapter(variant.weights, adapter_name=variant.key)
                self._loaded.add(variant.key)
            model.set_adapter(variant.key)
            _freeze(model)  # set_adapter makes the active adapter trainable again
            yield model
            return
        yield self._full_weights(variant).model

    def _full_weights(self, variant: Variant) -> Policy:
        """A full-fine-tuning checkpoint as a second model (the previous one freed first)."""
        if self._full is not None and self._full[0] == variant.key:
            return self._full[1]
        self._free_full()
        policy = load_policy(
            self.cfg.replace(lora={"enabled": False}),
            weights_path=variant.weights,
            remote_code=self.remote_code,
            for_inference=True,
        )
        _freeze(policy.model)
        self._full = (variant.key, policy)
        return policy

    def _free_full(self) -> None:
        if self._full is not None:
            self._full = None
            collect_cycles()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def close(self) -> None:
        self._free_full()
        self.base = None  # type: ignore[assignment]
        collect_cycles()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def __enter__(self) -> ModelVariants:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _freeze(model) -> None:
    model.eval()
    model.requires_grad_(False)
