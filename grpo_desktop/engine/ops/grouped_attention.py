"""Grouped key/value heads read in place by the CPU's attention kernel, not copied per query head.

Models with grouped-query attention (the demo's, Llama 3's, Qwen2's, SmolLM2's: fewer key/value
heads than query heads) reach transformers' sdpa attention with keys and values (N, Hkv, L, D).
Whenever an attention mask is passed, as in every GRPO pass (left-padded prompts), transformers
copies them to (N, H, L, D) first (`repeat_kv`) and the backward sums the copies' gradients
back: on the CPU that copy and that sum cost more than the attention itself (bench workload,
32 rows × 100 positions, 8 heads on 4: 25.4 against 15.9 ms per layer forward and backward).
torch's own kernel takes the grouped heads as they are (`enable_gqa=True`, torch 2.5+), with the
same result bit for bit on the CPU; transformers uses it only without a mask, because CUDA's
fast kernels would then fall back to the slow one. `use_on_cpu()` makes transformers' choice
(`sdpa_attention.use_gqa_in_sdpa`) say yes for CPU tensors as well; CUDA keeps transformers' own
answer. Nothing else changes: the same kernel, the same arithmetic, no copy.

Try it: tests/engine/ops/test_grouped_attention.py.
"""

from __future__ import annotations

import torch

_state: dict[str, object] = {}


def _torch_has_enable_gqa() -> bool:
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 5)


def use_on_cpu() -> bool:
    """From now on transformers' sdpa attention reads grouped heads in place on the CPU (once per
    process); False where this transformers or torch has no such switch."""
    if is_on():
        return True
    if not _torch_has_enable_gqa():
        return False
    try:
        from transformers.integrations import sdpa_attention
    except ImportError:
        return False
    original = getattr(sdpa_attention, "use_gqa_in_sdpa", None)
    if original is None:
        return False

    def use_gqa_in_sdpa(attention_mask, key, *args, **kwargs) -> bool:
        if key.device.type == "cpu" and (not args or key.shape[-1] == args[0].shape[-1]):
            return True  # (keys and values of one head size: the kernel's condition)
        return original(attention_mask, key, *args, **kwargs)

    _state["original"] = original
    sdpa_attention.use_gqa_in_sdpa = use_gqa_in_sdpa
    return True


def is_on() -> bool:
    """Whether `use_on_cpu()` has taken effect (and not been restored)."""
    return "original" in _state


def restore() -> None:
    """transformers' own choice again (tests)."""
    original = _state.pop("original", None)
    if original is not None:
        from transformers.integrations import sdpa_attention

        sdpa_attention.use_gqa_in_sdpa = original
