"""Switch a LoRA model's adapters off for a block: the reference model, and the merged decode.

Every training step with β > 0 turns the adapters off twice: once for the reference log-probs
(the starting model is the same network with its adapter off, loading.py) and once around the
decode, which runs on weights with the adapter folded in (sampling/sampler.py, `lora_merged`).
peft's `PeftModel.disable_adapter()` first builds the model's whole adapter status report
(`get_model_status`: every layer's adapters, parameter counts and devices, over several walks of
the module tree) only to learn whether the adapters were on, then walks the tree twice more to
switch them off and on: 3.6 ms per block on bench/vs_trl.py's 3M model (4 layers); the two
blocks took 14.4 ms of its 0.54 s step, 7.7 ms now (bench/README.md, session 22).

`adapters_off` does the same switching in one walk: every adapter layer (and peft's wrappers of
trainable modules) is switched with peft's own `enable_adapters`, which also clears and restores
the adapters' requires_grad, and put back on only if every one was on before. Where the same
switching would not give the base model (prompt tuning, adaption prompts, a trained bias) or the
layers disagree (some on, some off), peft's own `disable_adapter()` runs, its warnings included.

Try it: tests/engine/ops/test_adapters.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def _switches(model) -> tuple[list, bool] | None:
    """The modules whose adapters `model.disable_adapter()` switches and whether they are on, or
    None where that context does more than switch them (or this peft names things otherwise)."""
    try:
        from peft import PeftModel
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:
        return None
    if not isinstance(model, PeftModel):
        return None
    config = model.peft_config.get(model.active_adapter)
    if config is None or config.is_prompt_learning or config.is_adaption_prompt:
        return None
    if getattr(config, "bias", "none") != "none":  # peft warns: a trained bias stays on
        return None
    kinds = (BaseTunerLayer, AuxiliaryTrainingWrapper)
    switches = [module for module in model.modules() if isinstance(module, kinds)]
    layers = [module for module in switches if isinstance(module, BaseTunerLayer)]
    states = {module.disable_adapters for module in layers}
    if len(states) != 1:
        return None  # no adapter layers, or some on and some off: peft's warning says so
    return switches, states == {False}


@contextlib.contextmanager
def adapters_off(model) -> Iterator[None]:
    """As `model.disable_adapter()`: inside, the model computes its base model's function and
    its adapters take no gradient; on exit (also after an error) each is as it was."""
    found = _switches(model)
    if found is None:
        with model.disable_adapter():
            yield
        return
    switches, was_on = found
    was_disabled = getattr(model, "_adapters_disabled", False)
    try:
        for module in switches:
            module.enable_adapters(False)
        model._adapters_disabled = True
        yield
    finally:
        if was_on:
            for module in switches:
                module.enable_adapters(True)
        model._adapters_disabled = was_disabled
