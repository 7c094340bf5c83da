"""Sampling in bfloat16 on the CPU (the model setting "Sampling precision"): when, and what the run
log says about it.

A decode step of a model of tens of millions of parameters or more mostly reads its weights on
the CPU: SmolLM2-135M's 32 rows read 540 MB of float32 weights a token. Rounded to bfloat16 they
are half the bytes, and CPUs with bfloat16 instructions (AMX, AVX-512 BF16) multiply them at
several times the float32 rate: that model's sampled decode went 3.15 → 2.12 s (32 rows × 32
tokens, 2 cores of an Intel Xeon with AMX), a whole step's sampling 4.6–4.9 → 3.8–4.0 s
(bench/README.md, session 23). The lean CPU decoder (decode.py) then runs its products on
bfloat16 copies of the weights, with float32 accumulation, float32 outputs and everything else
(norms, rotary, attention, the draw) in float32. The prompt's prefill, and so each answer's
first token, stays exact, as does every greedy evaluation.

It changes the math: the answers are drawn from a model whose weights are rounded, while the
log-prob passes score them with the float32 model (SmolLM2's logits move by 1.1–1.3 % of their
range, its next-token distributions by about 2 % in total variation). That is the mismatch of a
trainer that samples through a separate inference server; it is why the setting is opt-in. Where
it would not pay (no bfloat16 instructions: emulated products are slower than float32; a GPU,
whose decode has its own path; weights already in bfloat16; a model under MIN_WEIGHT_BYTES,
whose decode is its small operations; models the lean decoder does not run) the decode stays as
it is and the run log says why.

Try it: python -c "from grpo_desktop.engine.sampling.precision import native_bf16; print(native_bf16())"
"""

from __future__ import annotations

import torch

BFLOAT16 = "bfloat16"  # ModelConfig.sampling_precision's choice that asks for it
# Below this many bytes of float32 weights the decode is bound by its small operations, not by
# reading weights, and the rounded products only add casts (2 cores of a Xeon with AMX, 32 rows
# × 64 tokens: the demo's 6 MB ×0.78, an 11 MB Llama ×0.91, an 89 MB one ×1.44, SmolLM2's
# 540 MB ×1.46; bench/README.md, session 23).
MIN_WEIGHT_BYTES = 32 * 2**20


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX tiles)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    for name in checks:
        fn = getattr(getattr(torch, "cpu", None), name, None)
        try:
            if callable(fn) and fn():
                return True
        except (RuntimeError, AttributeError):  # a torch build without the query
            continue
    return False


def weight_bytes(model) -> int:
    """Bytes of the model's parameters (tied ones once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _why_not(
    choice: str, device: torch.device, weight_dtype: torch.dtype, size: int | None
) -> str | None:
    """Why the decode does not round to bfloat16 for this run (None: it does). `size`: the
    model's weight bytes (None: not known, not checked)."""
    if choice != BFLOAT16:
        return "not asked for"
    if device.type != "cpu":
        return f"it applies to CPU sampling only; this run samples on {device.type.upper()}"
    if weight_dtype != torch.float32:
        return f"the weights are already {str(weight_dtype).removeprefix('torch.')}"
    if size is not None and size < MIN_WEIGHT_BYTES:
        return (
            f"the model is small ({size / 2**20:.0f} MB of weights): its decode is bound by "
            "small operations, not by reading weights, and rounding would slow it down"
        )
    if not native_bf16():
        return (
            "this CPU has no bfloat16 instructions (AMX or AVX-512 BF16), where bfloat16 products "
            "are slower than float32 ones"
        )
    return None


def decode_dtype(
    choice: str, device: torch.device, weight_dtype: torch.dtype, size: int | None = None
) -> torch.dtype | None:
    """torch.bfloat16 when this run's decode should round its products to bfloat16, else None.
    `size`: the model's weight bytes (`weight_bytes`)."""
    return torch.bfloat16 if _why_not(choice, device, weight_dtype, size) is None else None


def describe(
    choice: str, device: torch.device, weight_dtype: torch.dtype, size: int | None = None
) -> str | None:
    """The run log's line about sampling precision, or None when it was not asked for."""
    if choice != BFLOAT16:
        return None
    why = _why_not(choice, device, weight_dtype, size)
    if why is None:
        return (
            "Sampling precision bfloat16: answers are decoded with the weights rounded to "
            "bfloat16 (faster on this CPU); the prompts, the scoring and held-out evaluation stay "
            "exact. Llama-family models (Llama, Qwen2, SmolLM2) with unquantized weights only; "
            "others sample as usual."
        )
    return f"Sampling precision bfloat16 has no effect here: {why}. Answers are sampled as usual."


def for_policy(policy, choice: str) -> torch.dtype | None:
    """`decode_dtype` for a loaded policy (engine/models/loading.py's Policy): its device,
    compute dtype and weight bytes; no walk over its parameters unless bfloat16 is asked for."""
    if choice != BFLOAT16:
        return None
    return decode_dtype(choice, policy.device, policy.dtype, weight_bytes(policy.model))


def describe_for(policy, choice: str) -> str | None:
    """`describe` for a loaded policy, as `for_policy` decides."""
    if choice != BFLOAT16:
        return None
    return describe(choice, policy.device, policy.dtype, weight_bytes(policy.model))
