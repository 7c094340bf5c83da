"""LoRA layers with the adapter added in one addmm (engine/ops/lora_product.py): the same logits
and gradients as peft's own forward, peft's forward again after the block (also after an
error), the reference pass (adapters off) untouched, dropout drawn as peft draws it, and layers
it cannot compute exactly left to peft."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.ops.lora_product import _plain_lora_layers, fused_lora


def _lora_model(tiny_model_dir, dropout: float = 0.0, **extra):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear")
    for key, value in extra.items():
        setattr(config, key, value)
    model = get_peft_model(model, config)
    with torch.no_grad():  # B = 0 at init would make the adapter's part vanish
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return model.train()


def _ids(model, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (3, 11), generator=g)  # (B, T)


def _logits_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits  # (B, T, V)
    weights = torch.linspace(-1, 1, logits.numel()).view_as(logits)
    (logits * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def test_logits_and_gradients_equal_pefts_forward(tiny_model_dir):
    model = _lora_model(tiny_model_dir)
    ids = _ids(model)
    want_logits, want_grads = _logits_and_grads(model, ids)
    with fused_lora(model) as swapped:
        got_logits, got_grads = _logits_and_grads(model, ids)
    assert swapped == len(_plain_lora_layers(model)) > 0
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-5)
    assert got_grads.keys() == want_grads.keys() and all("lora_" in n for n in got_grads)
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-5)


def test_the_block_swaps_peft_layers_only_inside_it_and_restores_them_after_an_error(
    tiny_model_dir, monkeypatch
):
    model = _lora_model(tiny_model_dir)
    layers = _plain_lora_layers(model)
    assert layers and all("forward" not in vars(layer) for layer in layers)
    calls = []
    original = torch.Tensor.addmm_

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "addmm_", spy)
    with pytest.raises(RuntimeError, match="inside"), fused_lora(model):
        assert all("forward" in vars(layer) for layer in layers)
        model(input_ids=_ids(model))
        raise RuntimeError("an error inside the block")
    inside = len(calls)
    model(input_ids=_ids(model))
    assert inside == len(layers)  # one in-place addmm per adapted layer and forward
    assert len(calls) == inside  # none after the block: peft's own forward again
    assert all("forward" not in vars(layer) for layer in layers)


def test_with_adapters_off_it_is_the_base_model(tiny_model_dir):
    """The reference pass switches the adapters off: the block then computes the base model."""
    model = _lora_model(tiny_model_dir)
    ids = _ids(model)
    with torch.no_grad(), model.disable_adapter():
        want = model(input_ids=ids).logits
    with torch.no_grad(), fused_lora(model), model.disable_adapter():
        got = model(input_ids=ids).logits
    with torch.no_grad(), fused_lora(model):
        adapted = model(input_ids=ids).logits
    assert torch.equal(got, want)
    assert not torch.allclose(adapted, want, atol=1e-3)  # the adapters do change the output


def test_dropout_draws_as_peft_draws_it(tiny_model_dir):
    model = _lora_model(tiny_model_dir, dropout=0.3)
    ids = _ids(model)
    torch.manual_seed(5)
    want = model(input_ids=ids).logits.detach()
    torch.manual_seed(5)
    with fused_lora(model):
        got = model(input_ids=ids).logits.detach()
    torch.manual_seed(6)
    other = model(input_ids=ids).logits.detach()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(other, want, atol=1e-3)  # dropout is really drawn


def test_layers_it_cannot_compute_exactly_are_left_to_peft(tiny_model_dir):
    dora = _lora_model(tiny_model_dir, use_dora=True)
    assert _plain_lora_layers(dora) == []
    with fused_lora(dora) as swapped:
        assert swapped == 0
    biased = _lora_model(tiny_model_dir, lora_bias=True)
    assert _plain_lora_layers(biased) == []
    assert _plain_lora_layers(_lora_model(tiny_model_dir))  # the same model without them


class _ViewOut(torch.autograd.Function):
    """A base product whose output is a view made inside a custom Function, which autograd
    forbids changing in place (oneDNN's product returned such views for 3-D inputs)."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        out = x @ weight.t()  # (tokens, out)
        return out.view(out.shape)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x


def test_the_adapter_is_summed_in_place_except_into_a_view(tiny_model_dir, monkeypatch):
    model = _lora_model(tiny_model_dir)
    ids = _ids(model)
    want_logits, want_grads = _logits_and_grads(model, ids)
    in_place = []
    original = torch.Tensor.addmm_

    def spy(self, *args, **kwargs):
        in_place.append(self.shape)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "addmm_", spy)
    with fused_lora(model):
        _logits_and_grads(model, ids)
    assert len(in_place) == len(_plain_lora_layers(model))  # a plain product's new tensor
    in_place.clear()
    for layer in _plain_lora_layers(model):  # every base product now a custom Function's view
        base = layer.base_layer
        monkeypatch.setattr(base, "forward", lambda x, base=base: _ViewOut.apply(x, base.weight))
    with fused_lora(model):
        got_logits, got_grads = _logits_and_grads(model, ids)
    assert in_place == []
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-5)
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-5)
