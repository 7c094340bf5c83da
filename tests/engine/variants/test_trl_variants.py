"""A TRL output_dir's models in Try and Compare: engine/variants/run_variants.py lists and loads its checkpoint-N
folders and its final model (engine/variants/trl_models.py).

The outputs are laid out as TRL's Trainer saves them (save_pretrained into checkpoint-N/ and, with
`trainer.save_model()`, into the output_dir itself, plus trainer_state.json), from the tiny local
model with its weights moved and its tokenizer (full fine-tuning) or with a peft adapter (LoRA),
as tests/support/trl_tiny_run.py's real TRL run writes them (checked by hand: same files); each variant must
give exactly the logits of that folder loaded directly with transformers / peft.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.variants.run_variants import ModelVariants, find_variant, run_variants
from grpo_desktop.engine.variants.trl_models import is_trl_output, trl_base_model


def _logits(model, tokenizer, text: str = "3+4=") -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1].float()  # (V,)


def _state(folder: str, step: int) -> None:
    with open(os.path.join(folder, "trainer_state.json"), "w", encoding="utf-8") as fh:
        json.dump({"global_step": step, "log_history": [], "max_steps": step}, fh)


def _moved(model_dir: str, seed: int):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(scope="module")
def full_output(micro_model_dir, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("trl-full"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    for where, seed in ((os.path.join(out, "checkpoint-1"), 1), (out, 2)):
        _moved(micro_model_dir, seed).save_pretrained(where)
        tok.save_pretrained(where)  # TRL saves the processing class beside the weights
    _state(os.path.join(out, "checkpoint-1"), 1)
    _state(out, 2)
    return out


@pytest.fixture(scope="module")
def lora_output(micro_model_dir, tmp_path_factory) -> str:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = str(tmp_path_factory.mktemp("trl-lora"))
    for where, seed in ((os.path.join(out, "checkpoint-2"), 3), (out, 4)):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(micro_model_dir)
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
        model = get_peft_model(base, lora, adapter_name="default")
        with torch.no_grad():  # a trained adapter: B is no longer 0
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.5 * torch.randn_like(p))
        model.save_pretrained(where)
    _state(os.path.join(out, "checkpoint-2"), 2)
    _state(out, 2)
    return out


def test_a_trl_output_lists_its_checkpoints_then_the_final_model(full_output, lora_output):
    assert is_trl_output(full_output) and not is_trl_output(os.path.dirname(full_output))
    variants = run_variants(full_output)
    assert [v.key for v in variants] == ["base", "step-1", "final"]
    assert [v.label for v in variants[1:]] == ["Step 1", "Final model (step 2)"]
    assert not any(v.is_adapter for v in variants)
    assert find_variant(variants, "final") is variants[-1] is find_variant(variants, "latest")
    lora = run_variants(lora_output)
    assert [v.key for v in lora] == ["base", "step-2", "final"]
    assert all(v.is_adapter for v in lora[1:])


def test_full_weights_of_a_trl_output_load_as_saved(full_output, micro_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    cfg = demo_config().replace(model={"name_or_path": micro_model_dir}, lora={"enabled": False})
    with ModelVariants(cfg, full_output) as mv:
        for spec, folder in (("1", "checkpoint-1"), ("final", "")):
            with mv.use(spec) as m:
                got = _logits(m, tok)
            want = _logits(
                AutoModelForCausalLM.from_pretrained(os.path.join(full_output, folder)), tok
            )
            assert torch.allclose(got, want, atol=1e-5)
        with mv.use("base") as m:
            base = _logits(m, tok)
    assert torch.allclose(
        base, _logits(AutoModelForCausalLM.from_pretrained(micro_model_dir), tok), atol=1e-5
    )
    assert not torch.allclose(base, want, atol=1e-3)


def test_lora_adapters_of_a_trl_output_switch_on_its_base(lora_output, micro_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert trl_base_model(lora_output) == micro_model_dir  # what Try must load as the base
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    cfg = demo_config().replace(model={"name_or_path": trl_base_model(lora_output)})
    outs = {}
    with ModelVariants(cfg, lora_output) as mv:
        for spec in ("step-2", "final", "base", "step-2"):
            with mv.use(spec) as m:
                outs.setdefault(spec, []).append(_logits(m, tok))
    for spec, folder in (("step-2", "checkpoint-2"), ("final", "")):
        base = AutoModelForCausalLM.from_pretrained(micro_model_dir)
        want = _logits(PeftModel.from_pretrained(base, os.path.join(lora_output, folder)), tok)
        assert all(torch.allclose(got, want, atol=1e-5) for got in outs[spec])
    plain = _logits(AutoModelForCausalLM.from_pretrained(micro_model_dir), tok)
    assert torch.allclose(outs["base"][0], plain, atol=1e-5)
    assert not torch.allclose(outs["final"][0], plain, atol=1e-3)


def test_grpo_desktop_eval_scores_a_trl_output_folder_and_its_checkpoints(
    full_output, lora_output, tmp_path, capsys
):
    """`grpo-desktop eval OUT` on TRL's output folder: its final model (not taken for one of the
    app's own checkpoints because it holds a trainer_state.json), one checkpoint-N, a LoRA
    output's adapter on its base; an output with no weights yet says so."""
    from grpo_desktop.cli import main
    from grpo_desktop.engine.variants.eval_target import resolve_target

    def score(target: str) -> dict:
        assert main(["eval", target, "--n", "2", "--no-sample"]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    assert score(full_output)["step"] == 2
    assert score(os.path.join(full_output, "checkpoint-1"))["step"] == 1
    _cfg, adapter, weights, step = resolve_target(full_output)
    assert (adapter, weights, step) == (None, full_output, 2)
    cfg, adapter, weights, step = resolve_target(lora_output)
    assert (adapter, weights, step) == (lora_output, None, 2)
    assert cfg.model.name_or_path == trl_base_model(lora_output)
    assert score(lora_output)["step"] == 2

    empty = tmp_path / "trl-empty"
    empty.mkdir()
    _state(str(empty), 3)
    assert main(["eval", str(empty), "--n", "2", "--no-sample"]) == 2
    assert "TRL output folder with no saved model" in capsys.readouterr().err
