"""The answer-level GRPO Lab's math: a softmax policy over four whole answers to 17 × 24.

GRPO on a toy policy: the model's only choice is which of four complete answers to write (408
right; 398 and 418 wrong; the hedge "398 or 408"), so the policy is one logit per answer and
every quantity of a GRPO step (rewards, advantages, the policy gradient, the exact KL) can be
computed exactly and shown (`grpo_step` has the formulas). A sloppy checker that also pays the
hedge shows reward hacking; `signal_probability` shows why larger groups teach more often. The
worked example (LESSON_GROUP, LESSON_LR) is docs/grpo.md's "One step by hand".

Pure Python (no torch, no numpy, no Qt): the Lab window draws from it and the tests pin it. It
does not model tokens, ratio clipping (one update per group: the ratio is exactly 1) or the
length bias. Try it:  python -m grpo_desktop.engine.lab.answers
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

ANSWERS: tuple[str, ...] = ("408", "398", "418", "398 or 408")
RIGHT = 0  # index of "408"
HEDGE = 3  # index of "398 or 408"
START_PROBS: tuple[float, ...] = (0.25, 0.45, 0.25, 0.05)  # the worked example's model
# A weaker model for the same problem: the hedge is likelier than the right answer. With the
# standard model the sloppy checker pays the hedge like 408, but 408 starts five times likelier and
# wins the race (a rewarded answer's logit grows in proportion to its own probability); starting
# from this one the hedge takes over: a sloppy checker gets gamed first on the hardest problems.
WEAK_START_PROBS: tuple[float, ...] = (0.05, 0.50, 0.30, 0.15)
STARTS: dict[str, tuple[float, ...]] = {"lesson": START_PROBS, "weak": WEAK_START_PROBS}
# The worked example (docs/grpo.md, "One step by hand"): the group 408, 398, 398, 418 at lr 0.5.
LESSON_GROUP: tuple[int, ...] = (0, 1, 1, 2)
LESSON_LR = 0.5
CHECKERS = ("strict", "sloppy")
G_RANGE = (2, 16)


def softmax(logits: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    top = max(logits)
    exps = [math.exp(z - top) for z in logits]
    total = sum(exps)
    return tuple(e / total for e in exps)


def kl_divergence(p: tuple[float, ...], ref: tuple[float, ...]) -> float:
    """Exact KL(p ‖ ref) in nats (terms with p_k = 0 contribute 0; never below 0, which rounding
    of p = ref would otherwise give)."""
    return max(0.0, sum(pk * math.log(pk / rk) for pk, rk in zip(p, ref) if pk > 0))


def kl_gradient(p: tuple[float, ...], ref: tuple[float, ...]) -> tuple[float, ...]:
    """∇ of KL(softmax(z) ‖ ref) with respect to the logits z: p_j (log(p_j / r_j) − KL)."""
    kl = kl_divergence(p, ref)
    return tuple(pj * (math.log(pj / rj) - kl) if pj > 0 else 0.0 for pj, rj in zip(p, ref))


def reward(answer: int, checker: str) -> float:
    """The checker's score of answer index `answer`: strict accepts only 408; sloppy also
    accepts the hedge "398 or 408" because 408 appears in it."""
    if checker not in CHECKERS:
        raise ValueError(f"checker must be one of {', '.join(CHECKERS)}, not {checker!r}")
    if answer == RIGHT:
        return 1.0
    return 1.0 if checker == "sloppy" and answer == HEDGE else 0.0


def group_advantages(rewards: list[float]) -> tuple[float, float, tuple[float, ...]]:
    """(mean, std, advantages) of one group; std divides by G; a group with std 0 gets
    advantages of exactly 0."""
    G = len(rewards)
    mean = sum(rewards) / G
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / G)
    if std == 0.0:
        return mean, 0.0, tuple(0.0 for _ in rewards)
    return mean, std, tuple((r - mean) / std for r in rewards)


@dataclass(frozen=True)
class LabStep:
    """Everything one sample-score-update step computed, for display and tests. Per-answer
    tuples follow `ANSWERS`; per-rollout tuples follow `group`."""

    group: tuple[int, ...]
    checker: str
    lr: float
    beta: float
    rewards: tuple[float, ...]
    mean: float
    std: float
    advantages: tuple[float, ...]
    times_sampled: tuple[int, ...]
    advantage_sums: tuple[float, ...]  # Σ of the advantages of each answer's rollouts
    pg_gradient: tuple[float, ...]  # (1/G) Σ_i A_i (one-hot(o_i) − p)
    kl_grad: tuple[float, ...]  # ∇ KL(π ‖ π_start) at the logits before the step
    logit_changes: tuple[float, ...]
    logits_before: tuple[float, ...]
    logits_after: tuple[float, ...]
    probs_before: tuple[float, ...]
    probs_after: tuple[float, ...]
    kl_before: float
    kl_after: float

    @property
    def has_signal(self) -> bool:
        """False when every answer in the group scored the same: all advantages are 0."""
        return self.std > 0.0


def grpo_step(
    logits: tuple[float, ...],
    ref_probs: tuple[float, ...],
    group: tuple[int, ...] | list[int],
    checker: str = "strict",
    lr: float = LESSON_LR,
    beta: float = 0.0,
) -> LabStep:
    """One GRPO update of the answer logits for a given group (answer indices).

        score      strict checker: 1 for "408" only; sloppy checker: also 1 for the hedge
        advantage  A_i = (r_i − mean) / std, std dividing by G (no 1e-4 in the divisor); a
                   group whose answers all score the same has std 0 and every A_i = 0
        gradient   ∇_z log π(o_i) = one-hot(o_i) − p, so the step on the logits is
                   Δz = lr · [ (1/G) Σ_i A_i (one-hot(o_i) − p)  −  β ∇_z KL(π ‖ π_start) ]
        KL         exact: KL(π ‖ π_start) = Σ_k p_k log(p_k / r_k),
                   with ∇_{z_j} KL = p_j (log(p_j / r_j) − KL)

    A group's advantages sum to zero, so the −p term vanishes and each answer's logit moves by
    lr × (sum of its advantages) ÷ G. The worked example's group (408, 398, 398, 418; lr 0.5)
    gets advantages +√3 ≈ +1.732 and −1/√3 ≈ −0.577 and moves the probabilities to
    31.6 / 39.6 / 23.7 / 5.1 %."""
    group = tuple(group)
    G = len(group)
    if G < 1:
        raise ValueError("a group needs at least one answer")
    n = len(logits)
    p = softmax(logits)
    rewards = [reward(o, checker) for o in group]
    mean, std, adv = group_advantages(rewards)
    counts = [0] * n
    sums = [0.0] * n
    for o, a in zip(group, adv):
        counts[o] += 1
        sums[o] += a
    # (1/G) Σ_i A_i (one-hot(o_i) − p): the −p part is p_k Σ_i A_i, zero up to rounding
    total_adv = sum(adv)
    pg = tuple((sums[k] - p[k] * total_adv) / G for k in range(n))
    kl_g = kl_gradient(p, ref_probs)
    changes = tuple(lr * (pg[k] - beta * kl_g[k]) for k in range(n))
    after = tuple(z + d for z, d in zip(logits, changes))
    p_after = softmax(after)
    return LabStep(
        group=group,
        checker=checker,
        lr=lr,
        beta=beta,
        rewards=tuple(rewards),
        mean=mean,
        std=std,
        advantages=adv,
        times_sampled=tuple(counts),
        advantage_sums=tuple(sums),
        pg_gradient=pg,
        kl_grad=kl_g,
        logit_changes=changes,
        logits_before=tuple(logits),
        logits_after=after,
        probs_before=p,
        probs_after=p_after,
        kl_before=kl_divergence(p, ref_probs),
        kl_after=kl_divergence(p_after, ref_probs),
    )


@dataclass
class AnswerLab:
    """The lab's state: the policy's logits, the starting policy, a seeded RNG and the history
    of probabilities and KL (one entry per step, entry 0 = the start)."""

    seed: int = 0
    start_probs: tuple[float, ...] = START_PROBS
    logits: tuple[float, ...] = field(init=False)
    history_probs: list[tuple[float, ...]] = field(init=False)
    history_kl: list[float] = field(init=False)
    steps: int = field(init=False)

    def __post_init__(self) -> None:
        self.reset(self.seed)

    def reset(self, seed: int | None = None) -> None:
        """Back to the starting policy, the RNG re-seeded (with `seed` when given)."""
        if seed is not None:
            self.seed = seed
        self.rng = random.Random(self.seed)
        self.logits = tuple(math.log(q) for q in self.start_probs)
        self.history_probs = [softmax(self.logits)]
        self.history_kl = [0.0]
        self.steps = 0

    @property
    def probs(self) -> tuple[float, ...]:
        return softmax(self.logits)

    @property
    def kl(self) -> float:
        return kl_divergence(self.probs, self.start_probs)

    def sample(self, G: int) -> tuple[int, ...]:
        """G answers drawn from the current policy with the lab's RNG."""
        return tuple(self.rng.choices(range(len(self.logits)), weights=self.probs, k=G))

    def preview(
        self, group: tuple[int, ...], checker: str, lr: float, beta: float = 0.0
    ) -> LabStep:
        """What a step with `group` would do, without doing it."""
        return grpo_step(self.logits, self.start_probs, group, checker, lr, beta)

    def step(
        self,
        G: int,
        checker: str = "strict",
        lr: float = LESSON_LR,
        beta: float = 0.0,
        group: tuple[int, ...] | None = None,
    ) -> LabStep:
        """Sample a group of G (or use `group`), score it, update the logits; returns the step."""
        chosen = tuple(group) if group is not None else self.sample(G)
        result = grpo_step(self.logits, self.start_probs, chosen, checker, lr, beta)
        self.logits = result.logits_after
        self.history_probs.append(result.probs_after)
        self.history_kl.append(result.kl_after)
        self.steps += 1
        return result


def signal_probability(p: float, G: int) -> float:
    """Chance that a group of G answers holds both a success and a failure, for a problem the
    model solves with probability p: 1 − p^G − (1 − p)^G."""
    return 1.0 - p**G - (1.0 - p) ** G


def success_probability(probs: tuple[float, ...], checker: str) -> float:
    """The chance that one sampled answer scores 1 under `checker` (the p of the formula above)."""
    return sum(pk * reward(k, checker) for k, pk in enumerate(probs))


def signal_table(
    ps: tuple[float, ...] = (0.03, 0.70), Gs: tuple[int, ...] = tuple(range(2, 17))
) -> list[tuple[int, tuple[float, ...]]]:
    """Rows (G, (P(signal) for each p)) for the lab's table."""
    return [(G, tuple(signal_probability(p, G) for p in ps)) for G in Gs]


def _demo() -> None:
    lab = AnswerLab()
    s = lab.step(4, "strict", LESSON_LR, 0.0, group=LESSON_GROUP)
    print("advantages", [f"{a:+.3f}" for a in s.advantages])
    for k, name in enumerate(ANSWERS):
        print(f"{name:>11}  {s.probs_before[k]:6.1%} -> {s.probs_after[k]:6.1%}")
    for G, (hard, easy) in signal_table(Gs=(2, 4, 8, 16)):
        print(f"G={G:2d}  p=3%: {hard:5.1%}  p=70%: {easy:5.1%}")


if __name__ == "__main__":
    _demo()
