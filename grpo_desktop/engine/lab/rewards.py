"""The reward-design Lab's model: score a group of rollouts under any reward design, instantly.

The Lab holds rollouts that already exist (the built-in attempts at 17 × 23, engine/lab/attempts.py,
or a real step's rows from events.jsonl) and recomputes every reward and advantage when a setting
moves. It uses the engine's own code, so what it shows is what a run with these settings would
compute: `accuracy_verdicts` and `format_reward` (engine/rewards/functions.py), `weighted_total`
(unknown when a weighted part could not score, as in `RewardSet`), `compute_advantages` (engine/grpo/loss.py), and a
`CheckerProcess` (the sandboxed child the trainer uses) for a custom checker. Every score is
cached (a custom checker's per source and rollout), so re-weighting costs arithmetic only;
`RewardLab.run_checker` is the one slow call, which the GUI runs in the background.

Not here: a model. There is no policy, so no KL can be measured: β is explained (`kl_note`),
never turned into a number. torch is imported on the first `compute` only.
Try it:  python -m grpo_desktop.engine.lab.rewards
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace

from grpo_desktop.engine.checker.runner import CheckerProcess, CheckResult
from grpo_desktop.engine.lab import attempts as lab_attempts
from grpo_desktop.engine.lab.verdicts import Verdict, verdicts
from grpo_desktop.engine.rewards.functions import accuracy_verdicts, format_reward, weighted_total

PARTS = ("accuracy", "format", "custom")


@dataclass(frozen=True)
class LabRollout:
    """One completion in the Lab. `recorded` is what the run computed for it (its row's
    rewards, reward, advantage, error), empty for the built-in attempts."""

    prompt: str
    completion: str
    answer: str
    length: int  # tokens (the built-in group: an estimate, see lab_attempts.approx_tokens)
    group: int = 0
    label: str = ""
    truncated: bool = False
    recorded: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LabSettings:
    """The reward design and advantage settings the Lab scores with (TrainConfig's names)."""

    accuracy_weight: float = 1.0
    format_weight: float = 0.2
    format_credit: str = "all"  # all-or-nothing, or per_tag (rewards.format_credit)
    custom_weight: float = 0.0
    custom_checker: str = ""
    answer_checker: str = "strict"
    answer_extraction: str = "auto"
    think_tag: str = "think"
    answer_tag: str = "answer"
    numeric_tolerance: float = 1e-6
    scale_rewards: str = "group"
    std_type: str = "population"
    length_normalise: bool = True  # GRPO's per-sequence token mean; off: Dr. GRPO's constant
    beta: float = 0.04
    max_completion_length: int = lab_attempts.MAX_COMPLETION_TOKENS
    G: int = lab_attempts.DEFAULT_G  # the built-in group: how many attempts form it

    @classmethod
    def from_config(cls, config) -> LabSettings:
        """The settings of a TrainConfig (its rewards and algorithm sections)."""
        r, a = config.rewards, config.algorithm
        return cls(
            accuracy_weight=r.accuracy_weight,
            format_weight=r.format_weight,
            format_credit=r.format_credit,
            custom_weight=r.custom_weight if r.custom_checker.strip() else 0.0,
            custom_checker=r.custom_checker,
            answer_checker=r.answer_checker,
            answer_extraction=r.answer_extraction,
            think_tag=r.think_tag,
            answer_tag=r.answer_tag,
            numeric_tolerance=r.numeric_tolerance,
            scale_rewards=a.scale_rewards,
            std_type=a.std_type,
            length_normalise=a.loss_type != "dr_grpo",
            beta=a.beta,
            max_completion_length=a.max_completion_length,
            G=a.num_generations,
        )

    def weights(self) -> dict[str, float]:
        """The parts that count (positive weight; custom only with checker code), as RewardSet."""
        w = {"accuracy": self.accuracy_weight, "format": self.format_weight}
        if self.custom_checker.strip():
            w["custom"] = self.custom_weight
        return {k: float(v) for k, v in w.items() if v > 0}


@dataclass(frozen=True)
class ScoredRollout:
    index: int  # position in the Lab's list (0-based)
    rollout: LabRollout
    parts: dict  # {part: raw score or None}, every part computed (also at weight 0)
    reward: float | None  # weighted total; None: a weighted part could not score (unknown)
    advantage: float | None  # None when unscored (as the engine writes it)
    per_token: float | None  # the loss's weight on each of its tokens (see the module doc)
    extracted: str | None = None
    reason: str | None = None  # why accuracy scored so ("several answers: 381, 391")
    error: str | None = None  # the custom checker's error
    # The part of `advantage` the format reward makes: weight × (format − the group's mean
    # format) over the same divisor as the advantage (it is linear in the parts); 0 when the
    # format has no spread in the group or the group none at all; None when unscored.
    format_advantage: float | None = None


@dataclass(frozen=True)
class GroupStats:
    group: int
    size: int
    mean: float | None  # the baseline: mean reward of the scored rollouts
    std: float  # of `std_type`; 0 for a group without spread
    spread: bool  # whether its rewards differ (else every advantage is 0)


@dataclass(frozen=True)
class LabResult:
    settings: LabSettings
    rows: list[ScoredRollout]
    groups: list[GroupStats]
    verdicts: list[Verdict]
    custom_pending: bool = False  # the custom part waits for run_checker

    def group_rows(self, group: int) -> list[ScoredRollout]:
        return [r for r in self.rows if r.rollout.group == group]


class RewardLab:
    """A fixed set of rollouts, scored on demand under `LabSettings` (see the module doc).

    builtin: the rollouts are the built-in attempts and G picks how many form the group; else
    the groups are the rows' own (contiguous, equal sizes, as a run writes them)."""

    def __init__(
        self,
        rollouts: list[LabRollout],
        *,
        builtin: bool = False,
        run_checker_source: str = "",
        data=None,
    ):
        if not rollouts:
            raise ValueError("the Lab needs at least one rollout")
        self.rollouts = list(rollouts)
        self.builtin = builtin
        # The checker source the recorded "custom" scores came from (the run's); those are
        # reused without running anything while the Lab's source is the same.
        self.run_checker_source = run_checker_source
        # A reasoning-gym task run's data settings (a DataConfig): accuracy is then the task's
        # own checker, as in the run (rewards/task_score.py); None: the app's checker.
        self._task = None
        if data is not None and getattr(data, "source", "") == "task":
            from grpo_desktop.engine.rewards.task_score import TaskVerifier

            self._task = TaskVerifier(data)
        self._accuracy: dict[tuple, list] = {}
        self._format: dict[tuple, list[float]] = {}
        self._custom: dict[tuple[str, str, str, str], CheckResult] = {}
        self._process: CheckerProcess | None = None
        self._checker_lock = threading.Lock()  # one run_checker at a time
        self._close_after_run = False  # close() came while run_checker was busy

    @classmethod
    def with_builtin_group(cls, name: str = "multiply") -> RewardLab:
        """A built-in group (lab_attempts.BUILTIN_GROUPS): "multiply", the attempts at 17 × 23,
        or "untagged", a small real model's first answers, none with all the tags."""
        p, a, attempts = lab_attempts.BUILTIN_GROUPS[name]
        return cls(
            [
                LabRollout(p, t.completion, a, lab_attempts.approx_tokens(t.completion), 0, t.label)
                for t in attempts
            ],
            builtin=True,
        )

    @classmethod
    def from_rows(cls, rows: list[dict], run_checker_source: str = "", data=None) -> RewardLab:
        """A step's rollout rows (Rollouts.full_rows(): with "prompt") in their group order;
        `data`: the run's data settings (a task run is scored by the task's checker)."""
        return cls(
            [
                LabRollout(
                    str(r.get("prompt", "")),
                    str(r.get("completion", "")),
                    str(r.get("answer", "")),
                    int(r.get("length", 0) or 0),
                    int(r.get("group", 0) or 0),
                    truncated=bool(r.get("truncated", False)),
                    recorded={k: r.get(k) for k in ("rewards", "reward", "advantage", "error")},
                )
                for r in rows
            ],
            run_checker_source=run_checker_source,
            data=data,
        )

    # ---------------------------------------------------------------- the group

    def active(self, settings: LabSettings) -> list[LabRollout]:
        """The rollouts that form the group(s): the first G built-in attempts, or all rows."""
        if self.builtin:
            return self.rollouts[: max(2, min(settings.G, len(self.rollouts)))]
        return self.rollouts

    def group_size(self, settings: LabSettings) -> int:
        active = self.active(settings)
        if self.builtin:
            return len(active)
        groups = [r.group for r in active]
        size = groups.count(groups[0])
        if len(active) % size or any(groups[i] != groups[i - i % size] for i in range(len(groups))):
            raise ValueError("the rows are not in contiguous groups of equal size")
        return size

    # ---------------------------------------------------------------- scoring

    def _accuracy_of(self, s: LabSettings) -> list:
        """Every rollout's accuracy verdict under the checker settings of `s` (cached)."""
        key = (s.answer_extraction, s.answer_checker, s.answer_tag, s.think_tag)
        key += (s.numeric_tolerance,)
        if key not in self._accuracy and self._task is not None:
            self._accuracy[key] = self._task.verdicts(
                [r.prompt for r in self.rollouts],
                [r.completion for r in self.rollouts],
                [r.answer for r in self.rollouts],
                mode=s.answer_extraction,
                answer_tag=s.answer_tag,
                think_tag=s.think_tag,
                checker=s.answer_checker,
            )
        if key not in self._accuracy:
            self._accuracy[key] = accuracy_verdicts(
                [r.completion for r in self.rollouts],
                [r.answer for r in self.rollouts],
                mode=s.answer_extraction,
                answer_tag=s.answer_tag,
                think_tag=s.think_tag,
                tolerance=s.numeric_tolerance,
                checker=s.answer_checker,
            )
        return self._accuracy[key]

    def _format_of(self, s: LabSettings) -> list[float]:
        key = (s.think_tag, s.answer_tag, s.format_credit)
        if key not in self._format:
            self._format[key] = format_reward(
                [r.completion for r in self.rollouts],
                think_tag=s.think_tag,
                answer_tag=s.answer_tag,
                credit=s.format_credit,
            )
        return self._format[key]

    def _custom_of(self, r: LabRollout, source: str) -> CheckResult | None:
        if source == self.run_checker_source and "custom" in (r.recorded.get("rewards") or {}):
            return CheckResult(r.recorded["rewards"]["custom"], r.recorded.get("error"), None)
        return self._custom.get((source, r.completion, r.answer, r.prompt))

    def needs_checker(self, settings: LabSettings) -> bool:
        """Whether some custom-checker result for these settings is not known yet."""
        source = settings.custom_checker
        if not source.strip():
            return False
        return any(self._custom_of(r, source) is None for r in self.active(settings))

    def run_checker(self, source: str, timeout_s: float = 5.0, memory_mb: int = 2048) -> int:
        """Run the custom checker (in its sandboxed child, as the trainer does) on every rollout
        it has not scored yet; returns how many calls it made. Raises CheckerError when the
        source cannot load. Call from a worker thread: it takes a process start and one call
        per rollout. Only for code the user may run (the caller checks trust)."""
        with self._checker_lock:
            todo = [r for r in self.rollouts if self._custom_of(r, source) is None]
            if not todo:
                return 0
            proc = self._process
            if proc is None or proc.source != source or proc.timeout_s != float(timeout_s):
                self._close_process()
                proc = CheckerProcess(source, timeout_s=timeout_s, memory_mb=memory_mb)
                self._process = proc
            results = proc.check_many(
                [r.completion for r in todo], [r.answer for r in todo], [r.prompt for r in todo]
            )
            for r, res in zip(todo, results):
                self._custom[(source, r.completion, r.answer, r.prompt)] = res
            if self._close_after_run:
                self._close_process()
            return len(todo)

    def close(self) -> None:
        """Stop the checker's child process, if one was started. Idempotent, and never waits:
        while run_checker is busy in another thread, it stops the process when it is done."""
        if not self._checker_lock.acquire(blocking=False):
            self._close_after_run = True
            return
        try:
            self._close_process()
        finally:
            self._checker_lock.release()

    def _close_process(self) -> None:
        self._close_after_run = False
        if self._process is not None:
            self._process.close()
            self._process = None

    def compute(self, settings: LabSettings) -> LabResult:
        """Every part, reward, advantage and per-token size under `settings`, and the verdicts."""
        import torch

        from grpo_desktop.engine.grpo.loss import compute_advantages

        items = self.active(settings)
        G = self.group_size(settings)
        verdict_list = self._accuracy_of(settings)  # the active rollouts come first
        fmt = self._format_of(settings)
        weights = settings.weights()
        source = settings.custom_checker if settings.custom_checker.strip() else ""
        pending = False
        parts_list, totals, errors = [], [], []
        for i, r in enumerate(items):
            parts: dict[str, float | None] = {
                "accuracy": verdict_list[i].score,
                "format": fmt[i],
            }
            error = None
            if source:
                res = self._custom_of(r, source)
                pending = pending or res is None
                parts["custom"] = None if res is None else res.value
                error = None if res is None else res.error
            parts_list.append(parts)
            totals.append(weighted_total(weights, parts))  # None: a weighted part did not score
            errors.append(error)
        rewards = torch.tensor(
            [math.nan if t is None else t for t in totals], dtype=torch.float64
        )  # (N,)
        adv, std = compute_advantages(
            rewards, G, scale=settings.scale_rewards, std_type=settings.std_type
        )  # (N,), (B,)
        adv_list, std_list = adv.tolist(), std.tolist()
        fmt_adv = _format_advantages(
            totals, adv_list, [p["format"] for p in parts_list], weights.get("format", 0.0), G
        )
        rows = []
        for i, r in enumerate(items):
            a = None if totals[i] is None else adv_list[i]
            rows.append(
                ScoredRollout(
                    i,
                    r,
                    parts_list[i],
                    totals[i],
                    a,
                    _per_token(a, r.length, settings),
                    verdict_list[i].extracted,
                    verdict_list[i].reason,
                    errors[i],
                    fmt_adv[i],
                )
            )
        groups = []
        for b in range(len(items) // G):
            scored = [t for t in totals[b * G : (b + 1) * G] if t is not None]
            spread = any(rows[k].advantage not in (None, 0.0) for k in range(b * G, (b + 1) * G))
            groups.append(
                GroupStats(
                    items[b * G].group,
                    G,
                    math.fsum(scored) / len(scored) if scored else None,
                    float(std_list[b]),
                    spread,
                )
            )
        return LabResult(settings, rows, groups, verdicts(settings, rows, groups), pending)


def _format_advantages(
    totals: list[float | None],
    advantages: list[float],
    formats: list[float | None],
    weight: float,
    G: int,
) -> list[float | None]:
    """Each rollout's format share of its advantage (ScoredRollout.format_advantage).

    An advantage is (r − mean) / d with one divisor d per group (std + eps, the step's std, or
    1), and r is a weighted sum, so it splits exactly into one term per part:
    weight × (format − mean format) / d. d is read back from the group's largest advantage."""
    out: list[float | None] = [None if t is None else 0.0 for t in totals]
    if weight <= 0:
        return out
    for b in range(len(totals) // G):
        idx = [k for k in range(b * G, (b + 1) * G) if totals[k] is not None]
        if not idx:
            continue
        mean = math.fsum(totals[k] for k in idx) / len(idx)
        k = max(idx, key=lambda j: abs(advantages[j]))
        if abs(advantages[k]) < 1e-12:  # no spread: every advantage is 0, so is every share
            continue
        divisor = (totals[k] - mean) / advantages[k]
        f_mean = math.fsum(formats[j] or 0.0 for j in idx) / len(idx)
        for j in idx:
            out[j] = weight * ((formats[j] or 0.0) - f_mean) / divisor
    return out


def _per_token(adv: float | None, length: int, s: LabSettings) -> float | None:
    """Each token's weight in the loss (× 1/number of rollouts): GRPO A/L, Dr. GRPO A/L_max."""
    if adv is None or length <= 0:
        return None
    return adv / length if s.length_normalise else adv / max(1, s.max_completion_length)


def with_changes(settings: LabSettings, **changes) -> LabSettings:
    """A copy of `settings` with some fields changed (dataclasses.replace)."""
    return replace(settings, **changes)


if __name__ == "__main__":
    lab = RewardLab.with_builtin_group()
    result = lab.compute(LabSettings())
    print(f"17 × 23, G = {len(result.rows)}, baseline {result.groups[0].mean:.3f}")
    for row in result.rows:
        print(
            f"{row.index + 1:>2} {row.rollout.label:<38} reward {row.reward:.2f} "
            f"A {row.advantage:+.3f}  per token {row.per_token:+.4f}"
        )
    for v in result.verdicts:
        print(f"{v.title}: {v.text}")
