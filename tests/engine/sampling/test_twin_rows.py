"""Rows with the same prompt and the same tokens so far are stepped once, and every row samples
the tokens it samples when each is stepped on its own (engine/sampling/twin_rows.py).

The demo's groups of 8 agree token for token until a carry they disagree on: the decoder steps
one row per distinct history, forks a row's keys and values when its twins draw different
tokens, and drops a history whose rows all ended. The sampler's answers, streamed tokens and
entropies are compared with the same decode with twins off (each row its own decoder row), and
the decoder's rows are counted by a spy on the real step.
"""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.sampling import sampler
from grpo_desktop.engine.sampling.twin_rows import TwinRows
from tests.support.demo_decode import counted_decode, demo_prompts

# Groups of 8 rows per problem, as a GRPO step samples them; "5 × 6" is shorter, so its rows
# are left-padded beside the others.
PROBLEMS = ["17 × 24", "5 × 6", "91 × 73", "64 × 89"]
G = 8


def _decode(model, ids, mask, stops, pad, twins, monkeypatch, **sampling):
    """(tokens, entropies, streamed tokens, decoder rows of each step) with twins on or off."""
    monkeypatch.setattr(sampler, "TWIN_ROWS", twins)
    return counted_decode(monkeypatch, model, ids, mask, stops, pad, 5, **sampling)


def _assert_same_answers(alone, twinned, pad):
    tokens, entropy, streamed, _ = twinned
    assert torch.equal(tokens, alone[0])
    assert torch.equal(streamed, alone[2])  # on_token sees every row, padding included
    live = torch.ones_like(tokens, dtype=torch.bool)  # each row up to its end
    for i, row in enumerate(tokens.tolist()):
        ends = [t for t, x in enumerate(row) if x == pad]
        if ends:
            live[i, ends[0] :] = False
    # A history's logits come from products over other rows than without twins, which may
    # round differently in the last bits (the tokens are the same), and the keys and values
    # cached from them carry that into later steps: entropies to float32 rounding compounded
    # over the answer (at most 1.6e-5, 5e-5 relative, on an Intel Xeon whose MKL takes other
    # kernels for other row counts; 1e-6 on an AMD EPYC).
    assert torch.allclose(entropy[live], alone[1][live], rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize(
    "sampling",
    [{}, {"temperature": 0.7, "top_p": 0.9}, {"min_new_tokens": 3}],
    ids=["sampled", "top-p", "min-new"],
)
def test_the_demos_groups_sample_the_same_answers_stepping_each_history_once(monkeypatch, sampling):
    model, tok, ids, mask = demo_prompts(PROBLEMS, G)
    stops, pad = [tok.eos_token_id], tok.pad_token_id
    alone = _decode(model, ids, mask, stops, pad, False, monkeypatch, **sampling)
    twinned = _decode(model, ids, mask, stops, pad, True, monkeypatch, **sampling)
    _assert_same_answers(alone, twinned, pad)
    tokens, rows = twinned[0], twinned[3]
    # The first step runs one row per prompt and first token; while some rows still going
    # share a history, each step runs one row per distinct history.
    firsts = {(i // G, int(tokens[i, 0])) for i in range(tokens.size(0))}
    assert rows[0] == len(firsts)
    shared_steps = 0
    for t, n in enumerate(rows):
        going = [
            i
            for i in range(tokens.size(0))
            if not set(tokens[i, : t + 1].tolist()) & {pad, *stops}  # ended: no decoder row
        ]
        histories = {(i // G, tuple(tokens[i, : t + 1].tolist())) for i in going}
        if len(histories) < len(going):
            assert n == len(histories)
            shared_steps += 1
        else:  # all apart: the decoder steps the live rows (ended ones until they are dropped)
            assert n >= len(histories)
    assert shared_steps > 50
    # The groups did go separate ways (forks), and a fraction of the rows were stepped.
    assert max(rows) > len(PROBLEMS)
    assert sum(rows) < 0.6 * sum(alone[3])
    ended = [i for i in range(tokens.size(0)) if pad in tokens[i].tolist()]
    assert ended and len(ended) < tokens.size(0)  # some rows ended before others


def test_greedy_twins_never_part(monkeypatch):
    model, tok, ids, mask = demo_prompts(PROBLEMS, G)
    stops, pad = [tok.eos_token_id], tok.pad_token_id
    alone = _decode(model, ids, mask, stops, pad, False, monkeypatch, greedy=True)
    twinned = _decode(model, ids, mask, stops, pad, True, monkeypatch, greedy=True)
    _assert_same_answers(alone, twinned, pad)
    assert max(twinned[3]) == len(PROBLEMS)  # one decoder row per prompt throughout
    for g in range(len(PROBLEMS)):
        assert all(torch.equal(twinned[0][g * G], twinned[0][g * G + j]) for j in range(G))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_random_model_forks_at_once_and_samples_the_same_tokens(monkeypatch, arch):
    """An untrained model's rows part on their first token: nearly every step forks."""
    from grpo_desktop.engine.models.tiny import tiny_model

    model, tok = tiny_model("tiny", seed=3, arch=arch)
    model.eval()
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(10, len(tok), (3, 9), generator=g)
    ids = prompts.repeat_interleave(4, 0)  # (12, 9) three prompts, four rows each
    mask = torch.ones_like(ids)
    mask[4:8, :3] = 0  # the second prompt left-padded
    ids[4:8, :3] = tok.pad_token_id
    stops, pad = [tok.eos_token_id], tok.pad_token_id
    alone = _decode(model, ids, mask, stops, pad, False, monkeypatch, max_new_tokens=24)
    twinned = _decode(model, ids, mask, stops, pad, True, monkeypatch, max_new_tokens=24)
    _assert_same_answers(alone, twinned, pad)
    # The rows part within their first tokens; from then on the decode runs without twins,
    # stepping the same rows as the decode that never had them.
    tokens = twinned[0]
    apart = next(
        t
        for t in range(tokens.size(1))
        if len({tuple(r) for r in tokens[:, : t + 1].tolist()}) == 12
    )
    assert apart <= 2
    assert twinned[3][apart:] == alone[3][apart:]


class _Keeps:
    """A decoder that records the rows `TwinRows` asks it to keep (the real one runs in the
    tests above)."""

    def __init__(self) -> None:
        self.kept: list[list[int]] = []

    def keep(self, rows: torch.Tensor) -> bool:
        self.kept.append(rows.tolist())
        return True


def test_rows_that_drew_the_same_token_share_a_row_and_the_others_fork():
    decoder = _Keeps()
    # Six rows: rows 0-2 share prompt run 0 (first row 0), rows 3-5 run 1 (first row 3).
    twins = TwinRows(decoder, torch.tensor([0, 3]), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert twins.slot.tolist() == [0, 0, 0, 3, 3, 3]
    nxt = torch.tensor([5, 5, 7, 2, 2, 2])
    finished = torch.tensor([False, False, False, False, True, False])
    stepped = twins.advance(nxt, finished)
    # Run 0 forked on 5 / 7; run 1 goes on as one row (its ended row 4 needs none).
    assert decoder.kept == [[0, 0, 3]]
    assert stepped.tolist() == [5, 7, 2]
    assert [twins.slot[i].item() for i in (0, 1, 2, 3, 5)] == [0, 0, 1, 2, 2]
    # Nobody forks or ends: the decoder keeps its rows as they are (no copy).
    stepped = twins.advance(torch.tensor([1, 1, 4, 9, 0, 9]), finished)
    assert decoder.kept == [[0, 0, 3]] and stepped.tolist() == [1, 4, 9]
    logits = torch.arange(3.0).unsqueeze(1)  # (3, 1): row d holds d
    assert twins.rows(logits).flatten().tolist()[:4] == [0.0, 0.0, 1.0, 2.0]
    # The sampler drops its ended row 4; then row 2's history ends: its decoder row goes.
    twins.keep_rows(torch.tensor([0, 1, 2, 3, 5]))
    stepped = twins.advance(
        torch.tensor([3, 3, 0, 8, 8]), torch.tensor([False, False, True, False, False])
    )
    assert decoder.kept[-1] == [0, 2] and stepped.tolist() == [3, 8]
    assert [twins.slot[i].item() for i in (0, 1, 3, 4)] == [0, 0, 1, 1]
    # Then each row still going draws its own token: nothing left to share. The decoder's rows
    # become the live rows again, each given its history's row (row 2, ended, any row).
    assert (
        twins.advance(
            torch.tensor([1, 2, 0, 3, 4]), torch.tensor([False, False, True, False, False])
        )
        is None
    )
    assert decoder.kept[-1] == [0, 0, 0, 1, 1]


def test_rows_that_part_at_once_keep_the_prefills_rows():
    """An untrained model's rows part at their first token: the decoder's rows are the rows
    the prefill spread the prompts to, so nothing is copied."""
    decoder = _Keeps()
    twins = TwinRows(decoder, torch.tensor([0, 2]), torch.tensor([0, 0, 1, 1]))
    assert twins.advance(torch.tensor([4, 5, 4, 6]), torch.zeros(4, dtype=torch.bool)) is None
    assert decoder.kept == []
