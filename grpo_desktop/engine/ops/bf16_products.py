"""bfloat16 on the CPU for full fine-tuning: float32 master weights, the linear layers' products in
bfloat16, everything else in float32.

A model chosen in bfloat16 for full fine-tuning keeps float32 master weights (AdamW's small
updates would round away in bfloat16: engine/models/loading.py). On a GPU its forward runs under
autocast. On the CPU autocast costs more than it gains: the CPU's bfloat16 flash-attention
backward is about five times slower than float32's (42 against 8.4 ms a layer on the demo's
32 × 213 tokens), and decode steps of a few rows are slower in bfloat16 too. So there
`bf16_products()` routes only float32 `F.linear` through bfloat16 (weights and inputs rounded to
bfloat16, float32 accumulation in oneDNN/AMX, the output back in float32, a bias added in
float32); attention, norms and the softmax stay float32. Every such product inside the block,
whatever its rows, so a chunked output layer (ops/fused_head.py, which re-enters the block in its
backward: `active()`) computes what the model's own forward does. On a CPU with AMX a
training pass's products take about an eighth of the float32 time (bench/README.md, "Session
15"). Gradients flow through the casts: the weights' gradients arrive in float32.

Try it: tests/engine/ops/test_bf16_products.py.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops.linear_mode import LinearMode


class Bf16Products(LinearMode):
    """Inside its block, float32 CPU `F.linear` calls run in bfloat16 and return float32."""

    _open = threading.local()

    def linear(self, x, weight, bias):
        if not _routed(x, weight):
            return None
        out = F.linear(x.to(torch.bfloat16), weight.to(torch.bfloat16))  # (..., out)
        out = out.to(torch.float32)
        return out if bias is None else out + bias


def _routed(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return x.dtype == torch.float32 == weight.dtype and x.device.type == "cpu"


def bf16_products() -> Bf16Products:
    """The context: `with bf16_products(): model(...)`."""
    return Bf16Products()


def active() -> bool:
    """Whether this thread is inside a `bf16_products()` block."""
    return Bf16Products.depth() > 0
