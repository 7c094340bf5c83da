"""Model loading: local folders, clear errors, LoRA reference = adapter off, QLoRA on the CPU."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.models.loading import load_policy, resolve_model_path
from grpo_desktop.engine.sampling.rollout import generate_completions, token_logps, tokenize_prompts


def _cfg(path, **sections):
    return TrainConfig().replace(model={"name_or_path": path}, **sections)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="Model folder not found"):
        resolve_model_path(str(tmp_path / "nope"))


def test_folder_without_config_is_named(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model_path(str(tmp_path))


def test_unknown_hub_id_offline_explains_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelError, match="local Hugging Face cache"):
        load_policy(_cfg("someone/not-a-model"))


def _batch(policy):
    ids, mask = tokenize_prompts(
        policy.tokenizer, ["<|user|>What is 3×4?<|end|><|assistant|>"] * 2, 32, policy.device
    )
    comps = generate_completions(policy.model, policy.tokenizer, ids, mask, max_new_tokens=6)
    return ids, mask, comps.completion_ids, comps.completion_mask


def test_lora_reference_is_the_model_with_the_adapter_off(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    policy = load_policy(_cfg(tiny_model_dir))
    assert policy.uses_lora and policy.ref_model is None
    total, trainable = policy.num_parameters()
    assert 0 < trainable < total
    with torch.no_grad():  # move the adapter away from its zero init
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    batch = _batch(policy)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        with policy.reference() as ref:
            ref_logps, _ = token_logps(ref, *batch)
        base_logps, _ = token_logps(base, *batch)
        pol_logps, _ = token_logps(policy.model, *batch)
    assert torch.allclose(ref_logps, base_logps, atol=1e-5)
    assert not torch.allclose(pol_logps, base_logps, atol=1e-3)


def test_full_finetune_with_kl_keeps_a_frozen_reference(tiny_model_dir):
    policy = load_policy(_cfg(tiny_model_dir, lora={"enabled": False}, algorithm={"beta": 0.04}))
    assert not policy.uses_lora and policy.ref_model is not None
    assert all(not p.requires_grad for p in policy.ref_model.parameters())
    assert policy.num_parameters()[0] == policy.num_parameters()[1]
    no_ref = load_policy(_cfg(tiny_model_dir, lora={"enabled": False}, algorithm={"beta": 0.0}))
    assert no_ref.ref_model is None


def _lora_grads(policy, batch):
    policy.model.train()
    logps, _ = token_logps(policy.model, *batch)
    policy.model.zero_grad()
    logps.sum().backward()
    return {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("mode", ["4bit", "8bit"])
def test_qlora_loads_trains_and_generates_on_cpu(tiny_model_dir, mode):
    import bitsandbytes as bnb

    policy = load_policy(_cfg(tiny_model_dir, quantization={"mode": mode}))
    kind = bnb.nn.Linear4bit if mode == "4bit" else bnb.nn.Linear8bitLt
    assert any(isinstance(m, kind) for m in policy.model.modules())
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    batch = _batch(policy)  # generate (a no-grad eval forward) works
    grads = _lora_grads(policy, batch)
    assert grads and all(torch.isfinite(g).all() for g in grads.values())
    # The first layer's adapters get gradient only through the quantized layers above them.
    first = [g for n, g in grads.items() if "layers.0." in n and "lora_A" in n]
    assert first and all(g.abs().sum() > 0 for g in first)


def test_4bit_gradients_do_not_change_after_generation(tiny_model_dir):
    """bitsandbytes repacks 4-bit CPU weights on a no-grad forward into a kernel without autograd;
    the loader keeps the trainable path, so gradients are the same before and after generating."""
    policy = load_policy(_cfg(tiny_model_dir, quantization={"mode": "4bit"}))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    ids, mask = tokenize_prompts(policy.tokenizer, ["<|user|>7×8<|end|>"] * 2, 16, "cpu")
    cids = torch.randint(10, 60, (2, 5))
    batch = (ids, mask, cids, torch.ones(2, 5))
    before = _lora_grads(policy, batch)
    generate_completions(policy.model, policy.tokenizer, ids, mask, max_new_tokens=4)
    after = _lora_grads(policy, batch)
    for name in before:
        assert torch.allclose(before[name], after[name], atol=1e-5), name


def test_the_run_names_the_model_as_the_user_chose_it_not_its_resolved_folder():
    from grpo_desktop.engine.config.demo import demo_config

    policy = load_policy(demo_config())
    assert policy.name == "builtin:demo"  # not .../site-packages/grpo_desktop/resources/...
    assert resolve_model_path("builtin:demo") != "builtin:demo"
