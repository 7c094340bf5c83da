"""The shared shape of the app's torch function modes on `F.linear` (ops/kernels.py's oneDNN
routing, ops/bf16_products.py's bfloat16 products): each may compute a linear layer itself,
and counts its open blocks per thread (torch function modes are per thread), so other code can
ask whether one is open (`depth()`).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class LinearMode(TorchFunctionMode):
    """Subclasses set `_open = threading.local()` and define `linear(x, weight, bias)`, which
    returns the product or None to let the call run as it is."""

    _open: threading.local

    @classmethod
    def depth(cls) -> int:
        return getattr(cls._open, "depth", 0)

    def __enter__(self):
        type(self)._open.depth = self.depth() + 1
        return super().__enter__()

    def __exit__(self, *exc):
        type(self)._open.depth -= 1
        return super().__exit__(*exc)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias) -> torch.Tensor | None:
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:  # torch._C._nn.linear, which nn.Linear calls
            x = args[0] if args else kwargs["input"]
            weight = args[1] if len(args) > 1 else kwargs["weight"]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            out = self.linear(x, weight, bias)
            if out is not None:
                return out
        return func(*args, **kwargs)
