"""The reward-design Lab's live verdicts: GRPO's three classic failure modes, named with numbers.

`verdicts(settings, rows, groups)` looks at one scored group (or a real step's groups) and says
which failure modes the settings cause, quoting the rollouts that show it: reward_hacking (the
cheapest win is the tags, not the answer), length_bias (a short rollout's tokens pushed harder
than a long one's with the same advantage) and no_signal (a group whose rewards are all equal
teaches nothing), and format_flat (no rollout earns format credit, so the format teaches
nothing). With none of them it says what a healthy step looks like ("ok").
`kl_note(beta)` explains the KL leash in words: there is no model in the Lab, so there is no KL
to measure, and it says so.

Pure Python: no torch, no Qt. The rows are engine.lab.rewards.ScoredRollout (duck-typed here).
Try it:  python -m grpo_desktop.engine.lab.rewards
"""

from __future__ import annotations

from dataclasses import dataclass

LENGTH_BIAS_RATIO = 1.5  # per-token sizes this far apart (same sign of advantage) are a bias


@dataclass(frozen=True)
class Verdict:
    kind: str  # reward_hacking | length_bias | no_signal | ok
    title: str
    text: str


def _n(row) -> str:
    return f"#{row.index + 1}"


def _spread_without_accuracy(s, rows) -> Verdict | None:
    """Groups whose rollouts are all right or all wrong, yet whose rewards still differ: the
    other parts (format, the checker) decide every advantage there, not correctness."""
    if s.accuracy_weight <= 0:
        return None
    by_group: dict = {}
    for r in rows:
        if r.reward is not None:
            by_group.setdefault(r.rollout.group, []).append(r)
    hit = []
    for group, members in by_group.items():
        accuracy = {r.parts.get("accuracy") for r in members}
        rewards = [r.reward for r in members]
        if len(accuracy) == 1 and max(rewards) - min(rewards) > 1e-9:
            hit.append((group, accuracy.pop()))
    if not hit:
        return None
    group, acc = hit[0]
    state = "right" if acc == 1 else "wrong"
    where = "This group's" if len(by_group) == 1 else f"{len(hit)} of {len(by_group)} groups'"
    first = "" if len(by_group) == 1 else f" (group {group}: all {state})"
    return Verdict(
        "reward_hacking",
        "Only format teaches here",
        f"{where} rollouts are all equally {state}{first}, yet their rewards differ: every "
        "advantage comes from the other parts (the tags, your checker), so what the model "
        "learns from it is to emit those, not to solve the problem. Healthy while accuracy "
        "also varies elsewhere; if most groups look like this, the problems are too hard (or too "
        "easy) for this model, and the format reward is what it will learn.",
    )


def _reward_hacking(s, rows) -> Verdict | None:
    if not (s.format_weight > 0 and s.format_weight >= s.accuracy_weight):
        return _spread_without_accuracy(s, rows)
    wrong_tagged = [r for r in rows if r.parts.get("accuracy") == 0 and r.parts.get("format") == 1]
    right_bare = [r for r in rows if r.parts.get("accuracy") == 1 and r.parts.get("format") == 0]
    if wrong_tagged and right_bare:
        w, b = wrong_tagged[0], right_bare[0]
        example = (
            f"{_n(w)} is wrong but in tags and scores {w.reward:.2f}; {_n(b)} is right without "
            f"tags and scores {b.reward:.2f}."
        )
    else:
        example = (
            f"A wrong answer in tags scores {s.format_weight:g}, a right one without tags "
            f"{s.accuracy_weight:g}."
        )
    punished = [r for r in rows if r.parts.get("accuracy") == 1 and (r.advantage or 0.0) < -1e-9]
    if punished:
        p = punished[0]
        example += f" {_n(p)} is right, yet pushed down (A = {p.advantage:+.3f})."
    return Verdict(
        "reward_hacking",
        "Reward hacking",
        f"Format ×{s.format_weight:g} ≥ accuracy ×{s.accuracy_weight:g}: the cheapest win is to "
        f"emit the tags, not to solve the problem. {example} Keep accuracy dominant (format "
        "about 0.2) and watch a held-out accuracy, which the tags cannot fool.",
    )


def _length_pair(pushed: list):
    """(short, long) to show: the furthest apart in length among rollouts with the same
    advantage (same group, same reward) if any pair differs in length, else among all."""
    same: dict[tuple, list] = {}
    for r in pushed:
        same.setdefault((r.rollout.group, round(r.advantage, 12)), []).append(r)
    pairs = [
        (min(g, key=lambda r: r.rollout.length), max(g, key=lambda r: r.rollout.length))
        for g in same.values()
        if len(g) > 1
    ]
    pairs = [p for p in pairs if p[0].rollout.length < p[1].rollout.length]
    if not pairs:
        pairs = [
            (
                min(pushed, key=lambda r: r.rollout.length),
                max(pushed, key=lambda r: r.rollout.length),
            )
        ]
    return max(pairs, key=lambda p: p[1].rollout.length / max(1, p[0].rollout.length))


def _length_bias(s, rows) -> Verdict | None:
    if not s.length_normalise:
        return None
    for sign, who in ((1, "right"), (-1, "wrong")):
        pushed = [r for r in rows if r.per_token is not None and r.advantage * sign > 1e-9]
        if len(pushed) < 2:
            continue
        short, long = _length_pair(pushed)
        ratio = long.rollout.length / max(1, short.rollout.length)
        if ratio < LENGTH_BIAS_RATIO:
            continue
        verb = "pushed up" if sign > 0 else "pushed down"
        same = abs(short.advantage - long.advantage) < 1e-9
        why = (
            f"for the same reward, each token of the short one moves {ratio:.1f}× as much"
            if same
            else f"dividing by the length alone makes each token of the short one weigh {ratio:.1f}×"
            " as much"
        )
        return Verdict(
            "length_bias",
            "Length bias",
            f"Length normalisation divides each rollout's loss by its own length, so the short "
            f"{who} {_n(short)} ({short.rollout.length} tokens) is {verb} by "
            f"{short.per_token:+.4f} per token and the long {_n(long)} "
            f"({long.rollout.length} tokens) by {long.per_token:+.4f}: {why} "
            f"({long.rollout.length} / {short.rollout.length}). The model drifts toward "
            f"{'short' if sign > 0 else 'long'} answers whatever their quality. Dr. GRPO (turn "
            f"length normalisation off) divides every rollout by the same "
            f"{s.max_completion_length} tokens.",
        )
    return None


def _why_equal(s, members) -> str:
    if not s.weights():
        return "every weight is 0"
    scored = [r for r in members if r.reward is not None]
    if not scored:
        return "nothing could be scored"
    acc = {r.parts.get("accuracy") for r in scored}
    if s.accuracy_weight > 0 and acc == {1.0}:
        return f"every rollout is right (each scores {scored[0].reward:.2f})"
    if s.accuracy_weight > 0 and acc == {0.0}:
        return f"every rollout is wrong (each scores {scored[0].reward:.2f})"
    if s.accuracy_weight == 0:
        return f"accuracy weighs nothing and every rollout scores {scored[0].reward:.2f}"
    return f"every rollout scores {scored[0].reward:.2f}"


def _no_signal(s, rows, groups) -> Verdict | None:
    flat = [g for g in groups if not g.spread]
    if not flat:
        return None
    tail = (
        "GRPO learns only from the spread within a group: pick problems at the edge of the "
        "model's ability, where some attempts succeed and some fail."
    )
    if len(groups) == 1:
        why = _why_equal(s, rows)
        return Verdict(
            "no_signal",
            "No signal",
            f"No spread: {why}. Every advantage (r − mean) / std is 0, so this group teaches "
            f"nothing. {tail}",
        )
    shown = "; ".join(
        f"group {g.group}: {_why_equal(s, [r for r in rows if r.rollout.group == g.group])}"
        for g in flat[:3]
    )
    more = f" and {len(flat) - 3} more" if len(flat) > 3 else ""
    return Verdict(
        "no_signal",
        "No signal",
        f"{len(flat)} of {len(groups)} groups have no spread ({shown}{more}): their advantages "
        f"are all 0 and they teach nothing. {tail}",
    )


def _format_flat(s, rows) -> Verdict | None:
    """Not one scored rollout earns format credit: the format part is 0 everywhere."""
    scored = [r for r in rows if r.reward is not None]
    if s.format_weight <= 0 or not scored or any((r.parts.get("format") or 0) > 0 for r in scored):
        return None
    if getattr(s, "format_credit", "all") == "per_tag":
        return Verdict(
            "format_flat",
            "Format teaches nothing",
            "Not one rollout writes a single tag in its place, so even per-tag credit scores "
            "every one 0: the format part has no spread and adds nothing to any advantage. Show "
            "the format in the system prompt (a short example answer in the tags).",
        )
    return Verdict(
        "format_flat",
        "Format teaches nothing",
        "No rollout uses all the tags, so all-or-nothing credit scores every one 0: the format "
        "has no spread and adds nothing to any advantage (From format is 0), however many tags "
        "an answer got right. Switch Format credit to per tag: each tag in its place earns a "
        "quarter, so the answers with more tags are pushed up.",
    )


def verdicts(settings, rows, groups) -> list[Verdict]:
    """The failure modes these settings cause on these rows, or one "ok" verdict.

    - reward_hacking: the format weight is at or above the accuracy weight, so a wrong answer in
      tags scores at least as much as a right one without them. With accuracy dominant it still
      warns when a group's rollouts are all right (or all wrong) but their rewards differ: the
      other parts then decide every advantage of that group.
    - length_bias: with GRPO's per-sequence mean (length normalisation on) every rollout's loss
      is divided by its own length, so a short rollout's tokens get a bigger push than a long
      one's with the same advantage; Dr. GRPO divides by one constant instead.
    - no_signal: a group whose rewards are all equal (all right, all wrong, every weight 0) has
      every advantage exactly 0.
    - format_flat: the format weighs something but not one rollout earns any format credit, so
      the format part has no spread (the health alarm of the same name, in the Lab)."""
    found = [
        v
        for v in (
            _reward_hacking(settings, rows),
            _format_flat(settings, rows),
            _length_bias(settings, rows),
            _no_signal(settings, rows, groups),
        )
        if v is not None
    ]
    if found:
        return found
    up = [r for r in rows if r.advantage is not None and r.advantage > 0]
    down = [r for r in rows if r.advantage is not None and r.advantage < 0]
    baseline = groups[0].mean if len(groups) == 1 and groups[0].mean is not None else None
    against = f"the group mean {baseline:.2f}" if baseline is not None else "each group's mean"
    return [
        Verdict(
            "ok",
            "Healthy",
            f"{len(up)} rollouts are pushed up and {len(down)} down, each measured against "
            f"{against}: the group is its own baseline, no critic model needed, and accuracy "
            "dominates the reward.",
        )
    ]


def kl_note(beta: float) -> str:
    """What the KL leash β does, in words (the Lab has no model, so no KL to compute)."""
    honest = (
        " The Lab has no model, so there is no KL to measure here; at a run's first step the "
        "policy is the reference and the penalty is exactly 0. It does not change the rewards or "
        "advantages above."
    )
    if beta <= 0:
        return (
            "β = 0: no leash. Nothing pulls the policy back toward where it started, and the "
            "reference model's forward pass is skipped (faster; DAPO and Dr. GRPO do this)."
            + honest
        )
    strength = "a light leash" if beta < 0.1 else "a strong leash: learning slows"
    return (
        f"β = {beta:g}, {strength}. Each token's loss adds β × KL(policy ‖ reference), so the "
        "further training moves the model from where it started, the harder it is pulled back: "
        "the push from the advantages is partly cancelled as the policy drifts." + honest
    )
