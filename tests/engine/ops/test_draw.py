"""engine/ops/draw.py: the two-level inverse-CDF draw follows the distribution exactly, never picks a
masked token, and top-p through topk equals the full sort at any vocabulary."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.ops import draw as draw_module
from grpo_desktop.engine.ops.draw import (
    BLOCK,
    DivergedError,
    _blocks,
    _invert,
    _sorted_nucleus,
    draw,
    nucleus,
)


def _frequencies(probs: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """Observed frequencies (V,) of n draws from one distribution probs (V,)."""
    torch.manual_seed(seed)
    picks = draw(probs.expand(n, -1))  # (n,)
    return torch.bincount(picks, minlength=probs.numel()).double() / n


@pytest.mark.parametrize("V", [7, BLOCK, 3 * BLOCK + 5])
def test_draws_follow_the_distribution_within_five_standard_errors(V):
    g = torch.Generator().manual_seed(V)
    probs = torch.softmax(torch.randn(V, generator=g) * 2, -1)  # (V,)
    probs = probs * 3.0  # unnormalised rows are fine
    n = 50_000
    observed = _frequencies(probs, n)
    expected = (probs / probs.sum()).double()
    se = (expected * (1 - expected) / n).sqrt()
    assert ((observed - expected).abs() <= 5 * se + 1e-5).all()


def test_a_tiny_probability_far_along_a_large_vocabulary_keeps_its_own_interval():
    """A token of probability 1e-7 near the end of 151,936: shares u just inside its interval of
    the exact (float64) cumulative distribution pick it, shares just outside pick its neighbours.
    One cumulative sum stored in float32 moves the interval by up to 30 % of its width there."""
    V, j = 151_936, 151_930
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(1, V, generator=g)  # (1, V)
    probs[0, j] = 1e-7 * probs.sum()
    exact = probs.double().cumsum(-1) / probs.double().sum()  # (1, V) float64 truth
    start, end = float(exact[0, j - 1]), float(exact[0, j])
    width = end - start
    shares = torch.tensor(
        [
            [start - 0.1 * width],
            [start + 0.1 * width],
            [end - 0.1 * width],
            [end + 0.1 * width],
        ],
        dtype=torch.float64,
    )  # (4, 1)
    rows = probs.expand(4, -1)
    mass, cdf = _blocks(rows)
    assert _invert(rows, mass, cdf, shares).tolist() == [j - 1, j, j, j + 1]
    single = probs.cumsum(-1) / probs.sum()  # (1, V) the one float32 sum this replaces
    picked = torch.searchsorted(single.double().expand(4, -1).contiguous(), shares, right=True)
    assert picked.squeeze(1).tolist() != [j - 1, j, j, j + 1]


def test_masked_tokens_are_never_drawn_even_at_block_edges():
    V = 2 * BLOCK + 3
    logits = torch.randn(64, V)
    banned = torch.tensor([0, BLOCK - 1, BLOCK, 2 * BLOCK - 1, 2 * BLOCK, V - 1])
    logits[:, banned] = float("-inf")
    logits[:, BLOCK : 2 * BLOCK] = float("-inf")  # a whole block with no mass
    probs = torch.softmax(logits, -1)
    torch.manual_seed(0)
    for _ in range(50):
        picks = draw(probs)
        assert not torch.isin(picks, banned).any()
        assert not ((picks >= BLOCK) & (picks < 2 * BLOCK)).any()
        assert ((picks >= 0) & (picks < V)).all()


def test_a_certain_token_is_always_drawn_and_the_generator_makes_draws_repeatable():
    probs = torch.zeros(5, 3 * BLOCK)
    probs[torch.arange(5), torch.tensor([0, 5, BLOCK, 3 * BLOCK - 1, 2 * BLOCK])] = 1.0
    assert draw(probs).tolist() == [0, 5, BLOCK, 3 * BLOCK - 1, 2 * BLOCK]
    uniform = torch.ones(16, 5000)
    a = draw(uniform, torch.Generator().manual_seed(3))
    b = draw(uniform, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and len(set(a.tolist())) > 1


def test_probabilities_that_are_not_finite_say_training_diverged():
    probs = torch.softmax(torch.randn(2, 50), -1)
    probs[1, 3] = float("nan")
    with pytest.raises(DivergedError, match="diverged.*learning rate"):
        draw(probs)
    with pytest.raises(DivergedError):
        draw(torch.zeros(1, 10))


def test_top_p_through_topk_equals_the_full_sort(monkeypatch):
    g = torch.Generator().manual_seed(0)
    V = 20_000
    # Peaked rows (the nucleus inside the first 256), flatter ones (one widening) and a nearly
    # uniform one (the full sort), in one batch; no exact ties (which of equal tokens stays is
    # arbitrary in both).
    logits = torch.randn(6, V, generator=g) * torch.tensor(
        [[12.0], [8.0], [4.0], [2.0], [1.0], [0.01]]
    )
    for top_p in (0.01, 0.5, 0.9, 0.99):
        ours = torch.isfinite(nucleus(logits, top_p))
        sort = torch.isfinite(_sorted_nucleus(logits, top_p))
        assert torch.equal(ours, sort), top_p
        assert (ours.sum(-1) >= 1).all()
    assert torch.isfinite(nucleus(logits, 1.0)).all()
    widths = []
    real_topk = torch.topk
    monkeypatch.setattr(
        draw_module.torch, "topk", lambda x, k, **kw: widths.append(k) or real_topk(x, k, **kw)
    )
    nucleus(logits[:1], 0.9)  # the peaked row is found among the first candidates
    assert widths == [draw_module.FIRST_K]


def test_a_one_block_vocabulary_draws_the_same_tokens_as_the_two_level_search():
    # Issue 28: the demo's 107 tokens skip the first level's search (half the operations per
    # token); for the same u it must land on the very token the general inversion picks.
    from grpo_desktop.engine.ops import draw as module

    torch.manual_seed(0)
    for trial in range(400):
        V = int(torch.randint(1, module.BLOCK + 1, ()))
        N = int(torch.randint(1, 40, ()))
        logits = torch.randn(N, V) * float(torch.rand(()) * 10)
        if trial % 3 == 0:  # some tokens masked out, as top-p and min_new_tokens do
            logits[:, torch.rand(V) < 0.3] = float("-inf")
            logits[:, 0] = 0.0
        probs = torch.softmax(logits, dim=-1)
        fast = module.draw(probs, torch.Generator().manual_seed(trial))
        mass, cdf = module._blocks(probs)
        u = torch.rand(N, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(trial))
        assert torch.equal(fast, module._invert(probs, mass, cdf, u)), (trial, V, N)
        assert bool((probs.gather(1, fast.unsqueeze(1)) > 0).all())  # never a masked token


@pytest.mark.parametrize("V", [107, 3000])
def test_some_rows_of_a_batch_draw_what_they_would_have_drawn_in_it(V):
    # The sampler drops rows that ended (sampler._LiveRows): the others, drawn alone, must get
    # the random numbers and so the tokens they would have got beside them.
    probs = torch.rand(12, V, generator=torch.Generator().manual_seed(1)) ** 4  # (12, V)
    whole = draw(probs, torch.Generator().manual_seed(5))  # (12,)
    kept = torch.tensor([1, 4, 5, 11])
    some = draw(probs[kept], torch.Generator().manual_seed(5), rows=(kept, 12))  # (4,)
    assert torch.equal(some, whole[kept])
    alone = draw(probs[kept], torch.Generator().manual_seed(5))  # the first 4 numbers instead
    assert not torch.equal(alone, whole[kept])


def test_the_fused_kernels_draw_the_same_tokens_in_one_call(monkeypatch):
    """A one-block CPU draw runs in one call of the fused kernels (native_draw.cpp's
    `draw_block`), which repeats the one-block arithmetic: for the same random numbers the same
    tokens as without them, over vocabularies up to a block, rows that need not sum to 1,
    masked tokens, ties of equal cumulative sums, rows kept from a larger batch; a diverged row
    raises as without them."""
    from grpo_desktop.engine.ops import native

    if native.decode_ops() is None:
        pytest.skip(f"fused kernels not built here: {native.describe()}")
    kernels = draw_module._kernels_for

    def both(probs, rows=None, seed=0):
        """(the kernels' tokens, draw.py's own) for the same random numbers."""
        out = []
        for chosen in (kernels, lambda probs: None):
            monkeypatch.setattr(draw_module, "_kernels_for", chosen)
            torch.manual_seed(seed)
            out.append(draw(probs, rows=rows))
        return out

    assert kernels(torch.rand(2, 7)) is not None  # the kernels are in use here
    g = torch.Generator().manual_seed(5)
    for trial in range(120):
        N = int(torch.randint(1, 40, (1,), generator=g))
        V = int(torch.randint(1, BLOCK + 1, (1,), generator=g))
        logits = torch.randn(N, V, generator=g) * float(torch.rand(1, generator=g) * 20)
        if trial % 5 == 0:
            logits[:, ::3] = float("-inf")  # masked tokens: zero probability
        probs = torch.softmax(logits, -1) * (3.7 if trial % 7 == 0 else 1.0)
        rows = None
        if trial % 4 == 0:
            rows = (torch.randperm(N + 5, generator=g)[:N].sort().values, N + 5)
        mine, expected = both(probs, rows, seed=trial)
        assert torch.equal(mine, expected), trial
    ties = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).repeat(2000, 1)  # cumulative sums repeat
    mine, expected = both(ties, seed=1)
    assert torch.equal(mine, expected)
    assert set(expected.tolist()) == {1, 3}
    monkeypatch.setattr(draw_module, "_kernels_for", kernels)
    for bad in ([[float("nan"), 1.0]], [[0.0, 0.0]], [[float("inf"), 1.0]]):
        with pytest.raises(DivergedError, match="diverged"):
            draw(torch.tensor(bad))
