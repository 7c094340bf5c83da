"""Prompts' common beginning run once: a system prompt and a chat template's header, shared by
every prompt of a batch, go through the model for one row instead of each.

A step's prompts differ only in their question: the demo's 93-token prompts share their first
83 tokens, and a chat model's template and system prompt are the same words in every row. Both
places that run prompts use this: the sampler's prefill (sampler.py, no gradients) and the
log-prob passes (logps.py), where the prompt's keys and values carry gradients, so there the
shared beginning's forward and backward run once for the whole batch rather than once per
group. `prompt_pass` runs those k tokens for one row, lays their keys and values into every
row's cache at that row's place (after its left padding), then runs each row's remaining tokens
against them; the gradient of each shared key is the sum over the rows that read it. Equal to
running every row whole up to float rounding, for k·(N − 1) fewer token-passes.

Try it: tests/engine/sampling/test_sampler.py (the same tokens) and test_packed_logps.py (the
same log-probs and gradients).
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.sampling.decoders import CACHE, out_cache

MIN_COMMON = 16  # tokens of common beginning worth running once (and rows: at least 2)


def common_start(prompt_ids: torch.Tensor, attention: torch.Tensor) -> int:
    """Tokens that every left-padded prompt (N, P) begins with, at most the shortest prompt's
    length less one (each row keeps a token of its own to run)."""
    lengths = attention.sum(dim=1)  # (N,)
    shortest = int(lengths.min())
    if shortest < 2:
        return 0
    P = prompt_ids.size(1)
    pads = P - lengths  # (N,)
    cols = pads.unsqueeze(1) + torch.arange(shortest - 1, device=prompt_ids.device)  # (N, m)
    starts = prompt_ids.gather(1, cols)  # (N, m) each row's first m tokens
    same = (starts == starts[:1]).all(dim=0)  # (m,)
    return int(same.long().cumprod(0).sum())


def prompt_pass(module, prompt_ids, attention, positions, **extra):
    """(output, cache) of `module` (a causal LM or its decoder, called with `extra` too) over
    the prompts (N, P) with their common beginning of k tokens run once; the output covers each
    row's tokens after the shared columns (its last position is the prompt's end), the cache all
    P columns, as one pass over the prompts would give. None when fewer than MIN_COMMON tokens or
    2 rows share, or the cache is not plain full-attention layers exposing their tensors (then
    the caller runs the prompts whole)."""
    N, P = prompt_ids.shape
    k = common_start(prompt_ids, attention) if N >= 2 else 0
    if k < MIN_COMMON:
        return None
    pads = P - attention.sum(dim=1)  # (N,)
    W = int(pads.min()) + k  # columns the shared keys fill before the rest runs
    row = int(pads.argmin())
    head = module(
        input_ids=prompt_ids[row : row + 1, W - k : W],  # (1, k)
        attention_mask=attention[row : row + 1, W - k : W],
        position_ids=positions[row : row + 1, W - k : W],
        use_cache=True,
        **extra,
    )
    cache = out_cache(head)
    layers = getattr(cache, "layers", None)
    # Plain full-attention layers only: a sliding window's layer keeps a window, not all keys.
    if not layers or any(type(x).__name__ != "DynamicLayer" for x in layers):
        return None
    if not all(getattr(x, "keys", None) is not None for x in layers):
        return None
    if any(x.keys.dim() != 4 or x.keys.size(2) != k for x in layers):
        return None
    # Column j of row i holds shared token j − pads[i] when that is in [0, k): zeros elsewhere
    # (that row's padding, masked; or columns its own tokens will fill when run).
    index = torch.arange(W, device=pads.device).unsqueeze(0) - pads.unsqueeze(1)  # (N, W)
    inside = (index >= 0) & (index < k)  # (N, W)
    index = index.clamp(0, k - 1)
    for layer in layers:
        for name in ("keys", "values"):
            one = getattr(layer, name)[0]  # (Hkv, k, D)
            spread = one[:, index].permute(1, 0, 2, 3)  # (N, Hkv, W, D)
            setattr(layer, name, spread * inside[:, None, :, None].to(one.dtype))
    out = module(
        input_ids=prompt_ids[:, W:],  # (N, P - W)
        attention_mask=attention,
        position_ids=positions[:, W:],
        use_cache=True,
        **{CACHE: cache},
        **extra,
    )
    return out, out_cache(out)
