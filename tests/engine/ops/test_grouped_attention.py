"""engine/ops/grouped_attention.py: with it, transformers' sdpa attention on the CPU reads the
grouped key/value heads in place (no repeat_kv copy, in the forward or the backward) and computes
the same logits and gradients, bit for bit, as with the copy; other devices keep transformers'
own choice."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations import sdpa_attention

from grpo_desktop.engine.ops import fused_attention, grouped_attention


@pytest.fixture
def restored():
    """transformers' own choice during the test (a CPU run earlier in this process has already
    switched it, and put the fused kernels' attention in place of transformers' sdpa function),
    and the process's state as it was afterwards."""
    was_on, fused_was_on = grouped_attention.is_on(), fused_attention.is_on()
    grouped_attention.restore()
    fused_attention.restore()
    yield
    grouped_attention.restore()
    if was_on:
        grouped_attention.use_on_cpu()
    if fused_was_on:
        fused_attention.use_on_cpu()


def _left_padded_pass(model_dir: str):
    """Logits, gradients and repeat_kv calls of one forward and backward of the tiny Llama (2
    query heads on 1 key/value head) over left-padded rows."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").train()
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, model.config.vocab_size, (3, 12), generator=g)  # (B, T)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding: transformers passes an attention mask
    mask[2, :1] = 0
    calls = []
    original = sdpa_attention.repeat_kv

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    sdpa_attention.repeat_kv = spy
    try:
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        weights = torch.linspace(-1, 1, logits.numel()).view_as(logits)
        ((logits * weights) * mask[..., None]).sum().backward()
    finally:
        sdpa_attention.repeat_kv = original
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads, len(calls)


def test_grouped_heads_are_read_in_place_with_the_same_logits_and_gradients(
    tiny_model_dir, restored
):
    want_logits, want_grads, copies = _left_padded_pass(tiny_model_dir)
    assert copies > 0  # transformers copies the heads when a mask is passed
    assert grouped_attention.use_on_cpu() is True
    got_logits, got_grads, copies = _left_padded_pass(tiny_model_dir)
    assert copies == 0
    assert torch.equal(got_logits, want_logits)
    assert want_grads.keys() == got_grads.keys()
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-6, atol=1e-7)


def test_other_devices_keep_transformers_choice(restored):
    assert grouped_attention.use_on_cpu() is True
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool, device="meta")
    key = torch.empty(1, 1, 4, 8, device="meta")
    assert sdpa_attention.use_gqa_in_sdpa(mask, key, key) is False  # a mask: transformers says no
    cpu_mask, cpu_key = torch.ones(1, 1, 4, 4, dtype=torch.bool), torch.empty(1, 1, 4, 8)
    assert sdpa_attention.use_gqa_in_sdpa(cpu_mask, cpu_key, cpu_key) is True
    grouped_attention.restore()
    assert sdpa_attention.use_gqa_in_sdpa(cpu_mask, cpu_key, cpu_key) is False
