"""A CPU decode drops the rows that ended and samples the very same tokens for the others.

Issue 28, on SmolLM2-135M: answers of 3 to 64 tokens in one step, and every decode step ran all
32 rows until the longest ended. `sample_tokens` now goes on with the live rows only once a
quarter of them ended (sampler.DROP_SHARE); each kept row keeps its keys, values and random
numbers, so the tokens and streamed tokens are those of a decode that keeps them all, and the
entropies agree to float32 rounding.
"""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.sampling import sampler
from tests.support.demo_decode import counted_decode, demo_prompts

PROBLEMS = ["17 × 24", "38 × 46", "55 × 12", "91 × 73", "20 × 11", "64 × 89"]


def _decode(model, ids, mask, stops, pad, share, monkeypatch, **sampling):
    """(tokens, entropies, streamed tokens, rows of each decode step) with DROP_SHARE `share`."""
    monkeypatch.setattr(sampler, "DROP_SHARE", share)
    monkeypatch.setattr(sampler, "TWIN_ROWS", False)  # each decoder row is one row (see twins')
    return counted_decode(monkeypatch, model, ids, mask, stops, pad, 11, **sampling)


@pytest.mark.parametrize(
    "sampling",
    [{}, {"temperature": 0.7, "top_p": 0.9}, {"greedy": True}, {"min_new_tokens": 3}],
    ids=["sampled", "top-p", "greedy", "min-new"],
)
def test_dropping_ended_rows_samples_the_same_tokens(monkeypatch, sampling):
    model, tok, ids, mask = demo_prompts(PROBLEMS, 2)
    stops, pad = [tok.eos_token_id], tok.pad_token_id
    with torch.no_grad():
        kept = _decode(model, ids, mask, stops, pad, 10.0, monkeypatch, **sampling)
        dropped = _decode(model, ids, mask, stops, pad, 0.25, monkeypatch, **sampling)
    tokens, entropy, streamed, rows = dropped
    assert set(kept[3]) == {12}  # never dropping: every step runs all 12 rows
    assert rows[-1] < 12 and rows == sorted(rows, reverse=True)  # ended rows were left out
    assert sum(rows) < 12 * len(rows)
    assert torch.equal(tokens, kept[0])
    assert torch.equal(streamed, kept[2])  # on_token still sees all 12 rows, padding included
    assert torch.equal(streamed, tokens)
    live = torch.ones_like(tokens, dtype=torch.bool)
    for i, row in enumerate(tokens.tolist()):  # each row is padding after its first stop
        ends = [t for t, x in enumerate(row) if x in stops]
        if ends:
            assert all(x == pad for x in row[ends[0] + 1 :])
            live[i, ends[0] + 1 :] = False
    assert not bool(live.all())  # some rows did end early
    # A kept row's logits come from products over fewer rows, which may round differently in
    # the last bits (the tokens above are the same): its entropies agree to float32 rounding.
    assert torch.allclose(entropy[live], kept[1][live], rtol=1e-5, atol=1e-6)
