"""One decode step through the model's own forward, for tests that compare a decoder with it.

The reference every decode test measures against: feed `tokens` (N,) at `positions` (N, 1)
with the running `attention` mask and transformers' cache, return the next-token logits (N, V)
and the grown cache.
"""

from __future__ import annotations

from grpo_desktop.engine.sampling import decoders


def forward_step(model, tokens, attention, positions, cache):
    """(logits (N, V), cache) of the model's forward for one token per row."""
    out = model(
        input_ids=tokens.unsqueeze(1),  # (N, 1)
        attention_mask=attention,  # (N, L)
        position_ids=positions,  # (N, 1)
        use_cache=True,
        **{decoders.CACHE: cache},
    )
    return out.logits[:, -1], decoders.out_cache(out)  # (N, V)
