"""LoRA layers in the training passes: the adapter's product, its scaling and its sum in one call.

peft's `Linear.forward` adds an adapter as `result + lora_B(lora_A(dropout(x))) * scaling`:
three operations over the full output width (the product into a new tensor, the scaled copy,
the sum), and in the backward one more scaled copy of the output's gradient. At a GRPO update's
token counts those passes over a (tokens, out) tensor cost about as much as the frozen base
product itself on the CPU (2,288 tokens, 256 → 688 on 2 cores: base 4.3 ms, peft's forward
7.7 ms, one `addmm` 5.3 ms). `fused_lora(model)` runs each plain LoRA layer as
`result.addmm_(lora_A(dropout(x)), lora_Bᵀ, alpha=scaling)` while its block is open: the same
function and gradient, with one rounding fewer where the library fuses the scaling into the sum
(bit-identical with MKL here; the tests compare against peft's forward to float rounding). The
sum goes into the base product's new output in place: an out-of-place `addmm` first copies that
(tokens, out) result, 12 of the 397 ms of a 1-thread forward and backward of bench/vs_trl.py's
3M model (bench/README.md, session 22). A result that is a view (a custom Function's output,
which autograd forbids changing) gets the out-of-place sum.

Only layers it can compute exactly are swapped: peft's `lora.Linear` with one active adapter,
not merged, no DoRA or other variant, no bias on lora_B, a plain `nn.Linear` base. A call it does
not cover (adapters switched off, as for the reference pass; other arguments; mixed dtypes)
goes to peft's own forward. Used around the update's passes (engine/grpo/step.py), where the
backward (and a checkpointed layer's recomputation) runs inside the block too.

Try it: tests/engine/ops/test_lora_product.py.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch


def _plain_lora_layers(model) -> list:
    """peft lora.Linear layers of `model` that `fused_lora` computes exactly (see the module
    docstring); [] when peft is not loaded (no adapters then)."""
    if "peft" not in sys.modules:
        return []
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:
        return []
    layers = []
    for module in model.modules():
        if type(module) is not LoraLinear:
            continue
        names = list(module.active_adapters)
        if len(names) != 1 or names[0] not in module.lora_A:
            continue
        name = names[0]
        B = module.lora_B[name]
        if (
            module.merged
            or name in getattr(module, "lora_variant", {})
            or module.use_dora.get(name, False)
            or type(module.base_layer) is not torch.nn.Linear
            or type(module.lora_A[name]) is not torch.nn.Linear
            or type(B) is not torch.nn.Linear
            or B.bias is not None
        ):
            continue
        layers.append(module)
    return layers


def _fused_forward(layer, name: str, peft_forward):
    """`layer`'s forward with the adapter added by one addmm; peft's for anything else."""
    A, B = layer.lora_A[name], layer.lora_B[name]
    dropout, scaling = layer.lora_dropout[name], layer.scaling[name]

    def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if args or kwargs or layer.disable_adapters or layer.merged:
            return peft_forward(x, *args, **kwargs)
        if not (x.dtype == A.weight.dtype == B.weight.dtype == layer.base_layer.weight.dtype):
            return peft_forward(x, *args, **kwargs)
        x2 = x.reshape(-1, x.size(-1))  # (tokens, in)
        result = layer.base_layer(x2)  # (tokens, out): a new tensor, no view of another
        h = A(dropout(x2))  # (tokens, r)
        if result._is_view():  # e.g. made by a custom Function: autograd forbids changing it
            result = torch.addmm(result, h, B.weight.t(), alpha=scaling)  # (tokens, out)
        else:
            # In place: the base product's backward keeps its input and weight, never its
            # output, so the adapter is summed into it without a copy of the result first.
            result.addmm_(h, B.weight.t(), alpha=scaling)  # (tokens, out)
        return result.view(*x.shape[:-1], result.size(-1))  # (..., out)

    return forward


@contextlib.contextmanager
def fused_lora(model) -> Iterator[int]:
    """Inside the block the plain LoRA layers of `model` add their adapter with one addmm each;
    yields how many were swapped. Their own forward is back on exit, also after an error."""
    layers = _plain_lora_layers(model)
    swapped = []
    try:
        for layer in layers:
            if "forward" in vars(layer):
                continue  # someone else's instance forward: left alone
            name = layer.active_adapters[0]
            layer.forward = _fused_forward(layer, name, layer.forward)
            swapped.append(layer)
        yield len(swapped)
    finally:
        for layer in swapped:
            del layer.forward
