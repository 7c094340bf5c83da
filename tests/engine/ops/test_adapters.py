"""A LoRA model's adapters off for a block in one walk of its modules (engine/ops/adapters.py):
inside, the base model's logits and no trainable adapter, exactly as peft's disable_adapter();
on exit (also after an error) every layer and requires_grad flag as before; a model already
switched off stays off; where switching is not the whole story (some layers on and some off, a
trained bias) peft's own context runs, its warning included. And a LoRA policy's reference is
its base model."""

from __future__ import annotations

import warnings

import pytest
import torch

from grpo_desktop.engine.ops.adapters import _switches, adapters_off


def _lora_model(tiny_model_dir, **extra):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(
        3, base.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits  # (2, 9, V)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", **extra)
    model = get_peft_model(base, config)
    with torch.no_grad():  # B = 0 at init would make the adapter vanish
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return model, ids, base_logits


def _state(model) -> tuple[dict[str, bool], list[bool], bool]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    layers = [m.disable_adapters for m in model.modules() if isinstance(m, BaseTunerLayer)]
    return grads, layers, model._adapters_disabled


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits  # (2, 9, V)


def test_inside_the_base_models_logits_and_after_it_everything_as_before(tiny_model_dir):
    model, ids, base_logits = _lora_model(tiny_model_dir)
    lora_logits = _logits(model, ids)
    before = _state(model)
    assert not torch.allclose(lora_logits, base_logits, atol=1e-3)  # the adapter matters
    with adapters_off(model):
        torch.testing.assert_close(_logits(model, ids), base_logits, rtol=0, atol=0)
        grads, layers, disabled = _state(model)
        assert not any(grads[n] for n in grads if "lora_" in n) and all(layers) and disabled
        with model.disable_adapter():  # peft's own, inside ours: the same state
            assert _state(model) == (grads, layers, disabled)
    assert _state(model) == before
    torch.testing.assert_close(_logits(model, ids), lora_logits, rtol=0, atol=0)
    with model.disable_adapter():  # and ours leaves what peft's leaves
        peft_inside = _state(model)
    with adapters_off(model):
        assert _state(model) == peft_inside


def test_an_error_inside_puts_the_adapters_back(tiny_model_dir):
    model, ids, _ = _lora_model(tiny_model_dir)
    before, lora_logits = _state(model), _logits(model, ids)
    with pytest.raises(RuntimeError, match="boom"), adapters_off(model):
        raise RuntimeError("boom")
    assert _state(model) == before
    torch.testing.assert_close(_logits(model, ids), lora_logits, rtol=0, atol=0)


def test_a_model_already_switched_off_stays_off(tiny_model_dir):
    model, ids, base_logits = _lora_model(tiny_model_dir)
    with model.disable_adapter():
        inside = _state(model)
        with adapters_off(model):
            assert _state(model) == inside
        assert _state(model) == inside
        torch.testing.assert_close(_logits(model, ids), base_logits, rtol=0, atol=0)


def test_where_switching_is_not_the_whole_story_pefts_context_runs(tiny_model_dir):
    from peft.tuners.tuners_utils import BaseTunerLayer

    model, _, _ = _lora_model(tiny_model_dir)
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    layers[0].enable_adapters(False)  # some layers on, some off
    assert _switches(model) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # before the block: peft warns on entering it
        with adapters_off(model):
            assert all(layer.disable_adapters for layer in layers)
    assert any("enabled and others that are disabled" in str(w.message) for w in caught)
    biased, _, _ = _lora_model(tiny_model_dir, bias="lora_only")
    assert _switches(biased) is None  # a trained bias stays on: peft warns about it
    assert _switches(torch.nn.Linear(2, 2)) is None


def test_the_reference_of_a_lora_policy_is_the_base_model(tiny_model_dir):
    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.models.loading import load_policy

    cfg = TrainConfig().replace(
        model={"name_or_path": tiny_model_dir}, lora={"enabled": True, "r": 4}
    )
    policy = load_policy(cfg)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    ids = torch.randint(3, 50, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with policy.model.disable_adapter():
            want = policy.model(input_ids=ids).logits  # (2, 7, V)
        with policy.reference() as ref:
            got = ref(input_ids=ids).logits  # (2, 7, V)
            assert all(not p.requires_grad for p in policy.model.parameters())
        trained = policy.model(input_ids=ids).logits  # (2, 7, V)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.allclose(trained, want, atol=1e-3)
    assert any(p.requires_grad for p in policy.model.parameters())
