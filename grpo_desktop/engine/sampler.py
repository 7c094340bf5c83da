"""A lean autoregressive sampler: the decode loop of one GRPO step, without `generate`'s overhead.

transformers' `generate` runs a general pipeline (logits processors, stopping criteria, cache
bookkeeping) around every token; on small models that overhead dominates — measured here on a 3M
Llama, 32 rows × 128 tokens on 2 CPU cores: 4.2 s with `generate`, 0.6 s with this loop. It does
only what GRPO needs: temperature, top-p, greedy, EOS handling, and positions taken from the
attention mask so left-padded rows are sampled exactly as the loss pass scores them.

Models whose forward does not accept these arguments (some remote-code models) fall back to
`generate` in rollout.py.
"""

from __future__ import annotations

import torch

SYNC_EVERY_CUDA = 8  # check "all rows finished" every k tokens on GPU (each check is a sync)


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches top_p (always at least one)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (N, V)
    probs = torch.softmax(sorted_logits, dim=-1)  # (N, V)
    before = probs.cumsum(dim=-1) - probs  # (N, V) mass of strictly more likely tokens
    remove_sorted = before >= top_p  # (N, V)
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)  # (N, V)
    return logits.masked_fill(remove, float("-inf"))


@torch.no_grad()
def sample_tokens(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    min_new_tokens: int = 0,
) -> torch.Tensor:
    """Completion ids (N, C) with C ≤ max_new_tokens; rows that ended are padded with pad_id."""
    N = prompt_ids.size(0)
    device = prompt_ids.device
    attention = prompt_mask.clone()  # (N, P)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # (N, P)
    out = model(
        input_ids=prompt_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    cache = out.past_key_values
    next_pos = positions[:, -1:] + 1  # (N, 1)
    finished = torch.zeros(N, dtype=torch.bool, device=device)  # (N,)
    ones = torch.ones(N, 1, dtype=attention.dtype, device=device)  # (N, 1)
    tokens = []
    for t in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()  # (N, V)
        if t < min_new_tokens:
            logits[:, eos_id] = float("-inf")
        if greedy:
            nxt = logits.argmax(dim=-1)  # (N,)
        else:
            logits = logits / temperature
            if top_p < 1.0:
                logits = _top_p_filter(logits, top_p)
            nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(1)  # (N,)
        nxt = nxt.masked_fill(finished, pad_id)
        tokens.append(nxt)
        finished |= nxt == eos_id
        if t == max_new_tokens - 1:
            break
        if (device.type != "cuda" or t % SYNC_EVERY_CUDA == 0) and bool(finished.all()):
            break
        attention = torch.cat([attention, ones], dim=1)  # (N, P + t + 1)
        out = model(
            input_ids=nxt.unsqueeze(1),
            attention_mask=attention,
            position_ids=next_pos,
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        next_pos = next_pos + 1
    return torch.stack(tokens, dim=1)  # (N, C)
