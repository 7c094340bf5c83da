"""The answer-level Lab's math (engine/lab/answers.py) against the lesson "Training a reasoner with
GRPO": its worked step on 17 × 24 and its signal-probability table, then what
the lab shows when it plays: strict and sloppy checkers, and β's pull back to the start."""

from __future__ import annotations

import math
import statistics

import pytest

from grpo_desktop.engine.lab.answers import (
    ANSWERS,
    HEDGE,
    LESSON_GROUP,
    RIGHT,
    START_PROBS,
    WEAK_START_PROBS,
    AnswerLab,
    grpo_step,
    kl_divergence,
    kl_gradient,
    reward,
    signal_probability,
    signal_table,
    softmax,
    success_probability,
)


def lesson_step():
    return AnswerLab(seed=0).step(4, "strict", 0.5, 0.0, group=LESSON_GROUP)


def test_the_lessons_group_gives_the_lessons_table():
    s = lesson_step()
    assert [ANSWERS[o] for o in s.group] == ["408", "398", "398", "418"]
    assert s.rewards == (1.0, 0.0, 0.0, 0.0)
    # mean (1 + 0 + 0 + 0) / 4 = 0.25; std sqrt((0.75² + 3 × 0.25²) / 4) = sqrt(0.1875) = 0.433
    assert s.mean == 0.25
    assert s.std == pytest.approx(math.sqrt(0.1875), abs=1e-12)
    assert f"{s.std:.3f}" == "0.433"
    # the lesson prints +1.732 and −0.577: exactly 0.75 / sqrt(0.1875) = √3 and −1/√3
    assert [f"{a:+.3f}" for a in s.advantages] == ["+1.732", "-0.577", "-0.577", "-0.577"]
    assert s.advantages[0] == pytest.approx(math.sqrt(3), abs=1e-9)
    assert s.advantages[1] == pytest.approx(-1 / math.sqrt(3), abs=1e-9)
    assert sum(s.advantages) == pytest.approx(0.0, abs=1e-12)  # a group's advantages cancel
    # logit changes: lr × (sum of the answer's advantages) ÷ G
    # 408: 0.5 × 1.732 ÷ 4 = +0.217; 398: 0.5 × (−1.155) ÷ 4 = −0.144; 418: −0.072; hedge: 0
    assert [f"{d:+.3f}" for d in s.logit_changes] == ["+0.217", "-0.144", "-0.072", "+0.000"]
    assert s.times_sampled == (1, 2, 1, 0)
    assert [f"{p:.1%}" for p in s.probs_before] == ["25.0%", "45.0%", "25.0%", "5.0%"]
    assert [f"{p:.1%}" for p in s.probs_after] == ["31.6%", "39.6%", "23.7%", "5.1%"]


def test_the_lessons_step_unrounded():
    """The same step in closed form: Δ = lr/G × (√3, −2/√3, −1/√3, 0) and p' ∝ p · e^Δ."""
    s = lesson_step()
    r3 = math.sqrt(3)
    deltas = [0.5 / 4 * r3, 0.5 / 4 * (-2 / r3), 0.5 / 4 * (-1 / r3), 0.0]
    for got, want in zip(s.logit_changes, deltas):
        assert got == pytest.approx(want, abs=1e-9)
    weights = [p * math.exp(d) for p, d in zip(START_PROBS, deltas)]
    for got, want in zip(s.probs_after, weights):
        assert got == pytest.approx(want / sum(weights), abs=1e-9)
    # the hedge was never sampled, its logit did not move, yet its share rose (softmax renormalises)
    assert s.logits_after[HEDGE] == s.logits_before[HEDGE]
    assert s.probs_after[HEDGE] > s.probs_before[HEDGE]
    # at the start the policy is the reference: KL 0 and no pull, so β changes nothing yet
    assert s.kl_before == 0.0
    with_beta = AnswerLab().step(4, "strict", 0.5, 0.3, group=LESSON_GROUP)
    assert with_beta.probs_after == pytest.approx(s.probs_after, abs=1e-12)


def test_policy_gradient_is_one_hot_minus_p():
    """The step's gradient equals (1/G) Σ A_i (one-hot(o_i) − p), written out for a group whose
    advantages do not come from this module."""
    logits = (0.3, -0.2, 0.1, -1.0)
    p = softmax(logits)
    s = grpo_step(logits, START_PROBS, (0, 3, 1, 1, 2, 0), "sloppy", lr=1.0, beta=0.0)
    # sloppy: 408 and the hedge score 1, the others 0: mean 0.5, std 0.5, advantages ±1
    assert s.rewards == (1.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    assert s.advantages == (1.0, 1.0, -1.0, -1.0, -1.0, 1.0)
    want = [0.0] * 4
    for o, a in zip(s.group, s.advantages):
        for k in range(4):
            want[k] += a * ((k == o) - p[k]) / 6
    assert s.pg_gradient == pytest.approx(tuple(want), abs=1e-12)


def test_kl_and_its_gradient_are_exact():
    ref = START_PROBS
    logits = (0.5, -0.1, 0.2, 0.9)
    p = softmax(logits)
    kl = sum(pk * math.log(pk / rk) for pk, rk in zip(p, ref))
    assert kl_divergence(p, ref) == pytest.approx(kl, abs=1e-12)
    grad = kl_gradient(p, ref)
    for k in range(4):  # central differences on the logits
        h = 1e-6
        up = list(logits)
        down = list(logits)
        up[k] += h
        down[k] -= h
        numeric = (kl_divergence(softmax(up), ref) - kl_divergence(softmax(down), ref)) / (2 * h)
        assert grad[k] == pytest.approx(numeric, abs=1e-7)


def test_a_group_that_all_scores_the_same_changes_nothing():
    s = AnswerLab().step(4, "strict", 0.5, 0.0, group=(1, 1, 2, 3))  # all wrong
    assert not s.has_signal
    assert s.advantages == (0.0, 0.0, 0.0, 0.0)
    assert s.logits_after == s.logits_before
    sloppy = AnswerLab().step(3, "sloppy", 0.5, 0.0, group=(0, 3, 0))  # all "right" to it
    assert not sloppy.has_signal and sloppy.probs_after == sloppy.probs_before


def test_checkers():
    assert [reward(k, "strict") for k in range(4)] == [1.0, 0.0, 0.0, 0.0]
    assert [reward(k, "sloppy") for k in range(4)] == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="strict, sloppy"):
        reward(0, "lenient")
    assert success_probability(START_PROBS, "sloppy") == pytest.approx(0.30)


def test_sampling_is_seeded():
    a, b, c = AnswerLab(seed=7), AnswerLab(seed=7), AnswerLab(seed=8)
    runs = [[lab.step(8, "strict", 0.5).group for _ in range(5)] for lab in (a, b, c)]
    assert runs[0] == runs[1] != runs[2]
    a.reset()
    assert a.probs == pytest.approx(START_PROBS) and a.steps == 0
    assert [a.step(8, "strict", 0.5).group for _ in range(5)] == runs[0]


def play(start, checker, beta=0.0, steps=40, seeds=range(8), G=4, lr=0.5):
    labs = []
    for seed in seeds:
        lab = AnswerLab(seed=seed, start_probs=start)
        for _ in range(steps):
            lab.step(G, checker, lr, beta)
        labs.append(lab)
    return labs


def test_sloppy_checker_lets_the_hedge_take_over_a_weak_model():
    # the weak model starts 408 at 5 %, the hedge at 15 %: the sloppy checker pays both, and the
    # likelier one wins. Seen for every seed: the hedge passes 50 % within 40 steps
    for lab in play(WEAK_START_PROBS, "sloppy"):
        assert lab.probs[HEDGE] > 0.5, lab.seed
        assert lab.probs[HEDGE] > lab.probs[RIGHT]
    # the strict checker never pays the hedge: on average 408 ends far above it
    strict = play(WEAK_START_PROBS, "strict")
    assert statistics.mean(lab.probs[RIGHT] for lab in strict) > 0.5
    assert statistics.mean(lab.probs[HEDGE] for lab in strict) < 0.1


def test_strict_checker_makes_408_grow_and_sloppy_keeps_the_hedge_alive():
    for lab in play(START_PROBS, "strict"):
        assert lab.probs[RIGHT] > 0.8, lab.seed
        assert lab.history_probs[-1][HEDGE] < START_PROBS[HEDGE]
    # from the lesson's model, the sloppy checker first grows the hedge (mean over 200 seeds,
    # 3 steps: 5.0 % -> about 5.6 %), and keeps it likelier than the strict one does
    early = play(START_PROBS, "sloppy", steps=3, seeds=range(200))
    assert statistics.mean(lab.probs[HEDGE] for lab in early) > 0.053
    sloppy = play(START_PROBS, "sloppy", steps=20, seeds=range(50))
    strict = play(START_PROBS, "strict", steps=20, seeds=range(50))
    assert statistics.mean(lab.probs[HEDGE] for lab in sloppy) > 2 * statistics.mean(
        lab.probs[HEDGE] for lab in strict
    )


def test_beta_pulls_back_toward_the_start():
    free = play(START_PROBS, "strict", beta=0.0)
    leashed = play(START_PROBS, "strict", beta=0.5)
    for a, b in zip(free, leashed):
        assert b.kl < a.kl, a.seed
        assert a.history_kl[-1] == pytest.approx(a.kl)
    hacked = play(WEAK_START_PROBS, "sloppy", beta=0.0)
    slowed = play(WEAK_START_PROBS, "sloppy", beta=0.5)
    # the KL penalty slows the hack down; it does not stop it
    assert statistics.mean(lab.probs[HEDGE] for lab in slowed) < statistics.mean(
        lab.probs[HEDGE] for lab in hacked
    )
    assert statistics.mean(lab.probs[HEDGE] for lab in slowed) > WEAK_START_PROBS[HEDGE]


def test_signal_table_matches_the_lesson():
    # the lesson's table: G, hard problem p = 3 %, easy problem p = 70 %
    lesson = {
        2: ("5.8%", "42.0%"),
        4: ("11.5%", "75.2%"),
        8: ("21.6%", "94.2%"),
        16: ("38.6%", "99.7%"),
    }
    rows = dict(signal_table())
    assert sorted(rows) == list(range(2, 17))
    for G, (hard, easy) in lesson.items():
        assert (f"{rows[G][0]:.1%}", f"{rows[G][1]:.1%}") == (hard, easy)
    # 1 − 0.97² − 0.03² = 1 − 0.9409 − 0.0009 = 0.0582
    assert signal_probability(0.03, 2) == pytest.approx(0.0582, abs=1e-12)
    assert signal_probability(0.0, 8) == 0.0 and signal_probability(1.0, 8) == 0.0
