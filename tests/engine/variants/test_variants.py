"""engine/variants/run_variants.py: a run's base model and checkpoints, one base in memory, switched by name."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.runs.files import read_run_config
from grpo_desktop.engine.variants.run_variants import ModelVariants, find_variant, run_variants


def _greedy(model, tokenizer, text: str = "12+7=") -> list[int]:
    from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts

    ids, mask = tokenize_prompts(tokenizer, [text], 64, torch.device("cpu"))
    with torch.no_grad():
        comps = generate_completions(model, tokenizer, ids, mask, max_new_tokens=12, greedy=True)
    return comps.completion_ids[0].tolist()


def _logits(model, tokenizer, text: str = "3+4=") -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1].float()  # (V,)


def test_run_variants_lists_base_then_checkpoints(trained_run):
    run = trained_run(lora=True)
    variants = run_variants(run)
    assert [v.key for v in variants] == ["base", "step-1", "step-2"]
    assert variants[0].weights is None and all(v.is_adapter for v in variants[1:])
    assert find_variant(variants, "latest").step == 2
    assert find_variant(variants, "1").key == "step-1"
    assert find_variant(variants, "step-2").label == "Step 2"
    with pytest.raises(UserError, match=r"no checkpoint '7'.*base, latest, or a step: 1, 2"):
        find_variant(variants, "7")
    assert run_variants(None) == variants[:1]


def test_lora_checkpoints_switch_on_one_base(trained_run):
    """The base is the model with adapters off; each checkpoint's adapter gives that step's
    weights, and switching back and forth returns the same outputs (nothing is merged in)."""
    from peft import PeftModel

    from grpo_desktop.engine.models.loading import load_policy

    run = trained_run(lora=True)
    cfg = read_run_config(run)
    with ModelVariants(cfg, run) as mv:
        with mv.use("base") as m:
            base = _logits(m, mv.tokenizer)
        with mv.use("step-2") as m:
            assert isinstance(m, PeftModel) and m.active_adapter == "step-2"
            late = _logits(m, mv.tokenizer)
        with mv.use("step-1") as m:
            early = _logits(m, mv.tokenizer)
        with mv.use("base") as m:
            assert torch.equal(_logits(m, mv.tokenizer), base)
        with mv.use("latest") as m:
            assert torch.equal(_logits(m, mv.tokenizer), late)
            assert not any(p.requires_grad for p in m.parameters())
        assert set(mv.base.model.peft_config) == {"step-1", "step-2"}
    assert not torch.equal(base, late) and not torch.equal(early, late)
    # The same numbers as loading the checkpoint the way a resumed run does.
    plain = load_policy(cfg.replace(algorithm={"beta": 0.0}))
    assert torch.allclose(_logits(plain.model, plain.tokenizer), base, atol=1e-5)
    resumed = load_policy(cfg, adapter_path=run_variants(run)[2].weights)
    assert torch.allclose(_logits(resumed.model, resumed.tokenizer), late, atol=1e-5)


def test_full_fine_tuning_checkpoint_is_a_second_model(trained_run):
    run = trained_run(lora=False)
    cfg = read_run_config(run)
    with ModelVariants(cfg, run) as mv:
        assert not mv.base.uses_lora
        with mv.use("base") as m:
            base_model, base = m, _greedy(m, mv.tokenizer)
        with mv.use("latest") as m:
            assert m is not base_model
            trained = _logits(m, mv.tokenizer)
        with mv.use("base") as m:
            assert _greedy(m, mv.tokenizer) == base
        tokenizer = mv.tokenizer
    assert not torch.equal(trained, _logits(base_model, tokenizer))


def test_on_token_streams_and_cancels(trained_run):
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts

    policy = load_policy(read_run_config(trained_run(lora=False)), for_inference=True)
    ids, mask = tokenize_prompts(policy.tokenizer, ["5+5=", "8+1="], 64, torch.device("cpu"))
    seen: list[torch.Tensor] = []
    full = generate_completions(
        policy.model,
        policy.tokenizer,
        ids,
        mask,
        max_new_tokens=10,
        greedy=True,
        on_token=lambda t, tok: seen.append(tok.clone()),
    )
    assert torch.equal(torch.stack(seen, dim=1), full.completion_ids[:, : len(seen)])
    cut = generate_completions(
        policy.model,
        policy.tokenizer,
        ids,
        mask,
        max_new_tokens=10,
        greedy=True,
        on_token=lambda t, tok: t < 2,  # stop after the third token
    )
    assert cut.completion_ids.size(1) == 3
    assert torch.equal(cut.completion_ids, full.completion_ids[:, :3])
