"""Follow a TRL `GRPOTrainer` output_dir as the app's events, read-only: plots, rollouts, alarms.

So a run trained with TRL can be watched in the app as if it were its own: a poll turns the newest
log history (session/trl_state.py) into `StepMetrics`, each new completions file
(session/trl_completions.py) into `Rollouts`, TRL's end-of-training entry into `RunFinished`, and
all of it into the health alarms. Never writes into the folder, and invents nothing TRL does not
record (no held-out accuracy, no token lengths or truncation). No Qt, no torch.

    reader = TrlRunReader("OUTPUT_DIR")
    events = reader.poll()        # the run so far: run_started, rollouts, step, alert, …
    events = reader.poll()        # later, while TRL keeps writing: only what is new

or in the app: `grpo-desktop open OUTPUT_DIR`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from grpo_desktop.engine.events import (
    Event,
    LogMessage,
    Rollouts,
    RunFinished,
    RunStarted,
    StepMetrics,
    rows_with_prompts,
)
from grpo_desktop.engine.health.monitors import HealthMonitor
from grpo_desktop.engine.runs.layout import trl_checkpoint_dirs
from grpo_desktop.session import trl_state
from grpo_desktop.session.trl_completions import (
    MAX_ROWS,
    advantage_histogram,
    completion_files,
    fit_weights,
    read_completions,
    row_count,
)

MAX_MODEL_CONFIG_BYTES = 1024 * 1024  # a model's config.json is a few KB
STALE_S = 30.0  # a file unchanged this long that cannot be read is damaged, not being written
BAD_POLLS = 3  # or one that failed this many polls in a row with the same size and time
DEVICE = "TRL"


def is_trl_run(folder: str) -> bool:
    """Whether `folder` looks like a TRL output_dir: a `trainer_state.json` at the top or in a
    `checkpoint-N/` folder, or `completions/completions_NNNNN.parquet` files."""
    if not os.path.isdir(folder):
        return False
    if os.path.isfile(os.path.join(folder, trl_state.STATE_FILE)):
        return True
    if any(
        os.path.isfile(os.path.join(p, trl_state.STATE_FILE))
        for _, p in trl_checkpoint_dirs(folder)
    ):
        return True
    return bool(completion_files(folder))


def model_name(folder: str) -> str:
    """The base model a TRL output names (an adapter's base, a config's _name_or_path, the model
    card's base_model), else the folder's name."""
    for name, key in (
        ("adapter_config.json", "base_model_name_or_path"),
        ("config.json", "_name_or_path"),
    ):
        path = os.path.join(folder, name)
        try:
            if os.path.getsize(path) > MAX_MODEL_CONFIG_BYTES:
                continue  # not a model's config: not worth reading for a name
            with open(path, encoding="utf-8") as fh:
                value = json.load(fh).get(key)
        except (OSError, ValueError, AttributeError, RecursionError):
            continue
        if isinstance(value, str) and value.strip():
            return value
    try:
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as fh:
            for line in fh.read(4000).splitlines():
                if line.startswith("base_model:") and line.split(":", 1)[1].strip():
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.path.basename(os.path.normpath(folder))


@dataclass
class _Failure:
    stamp: tuple[int, int]  # (size, mtime_ns) when it failed
    polls: int
    reported: bool = False


class TrlRunReader:
    """Poll a TRL output_dir for new events.

    Each poll gives `StepMetrics` for the steps not seen yet, from the newest log history (the
    top-level trainer_state.json, else the checkpoint's with the most steps), with TRL's metric
    names (the app's own), each step's advantage histogram from its completions and `elapsed`
    the sum of TRL's step_time; a `Rollouts` event per new or changed completions file;
    `RunFinished("completed")` at TRL's end-of-training entry; and the `Alert`s of
    `engine.health.monitors.HealthMonitor` (torch-free), as in the app's own runs.

    Cheap on a mounted or synced filesystem: a poll lists two folders, stats a few files and
    reads only those whose size or modification time changed. A file that cannot be read (a
    parquet being written, a trainer_state.json cut short) is tried again next poll; one that
    stays unreadable (unchanged for `STALE_S` seconds, or over `BAD_POLLS` polls) is reported
    once as a warning `LogMessage` naming the file and why. A log history shorter than what was
    shown (the run restarted from an earlier checkpoint) comes out as a resumed `RunStarted`.
    Rows' total reward uses the reward weights fitted to the log history (`fit_weights`; said
    once in a log message when they are not all 1), or 1 while they cannot be told.

    Bounded whatever the folder holds: only the newest `trl_state.MAX_LOG_ENTRIES` log entries
    and each completions file's last `MAX_ROWS` rows are read (each said once in an info
    message), and a file nested too deeply or too large to read is a warning, not an error
    out of the poll."""

    def __init__(self, folder: str, monitor: HealthMonitor | None = None):
        self.folder = os.path.abspath(folder)
        self.monitor = monitor or HealthMonitor()
        self.events_path: str | None = None  # no events.jsonl: the rows stay in memory
        self.last_step = 0  # the last step whose metrics were given out
        self.total_steps = 0
        self.finished = False
        self.started = False
        self._stamps: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) last read
        self._failures: dict[str, _Failure] = {}
        self._states: dict[str, dict] = {}  # state file -> its parsed content, while current
        self._hists: dict[int, dict] = {}  # step -> advantage histogram of its completions
        self._totals: dict[int, float] = {}  # step -> mean row reward, TRL's way (None as 0)
        self._reward_names: set[str] = set()
        self._weights_noted = False
        self._weights: dict[str, float] | None = None  # reward weights fitted to the log
        self._done_state: dict | None = None  # the state whose steps were given out last
        self._noted: set[str] = set()  # what was said once: a long log, a long completions file
        self.elapsed = 0.0

    # ------------------------------------------------------------------ polling

    def poll(self) -> list[Event]:
        """The events that are new since the last poll (all of them the first time)."""
        out: list[Event] = []
        state, warnings = self._newest_state()
        if state is self._done_state:
            state = None  # read before and unchanged: nothing new in it
        if state is not None:
            self._done_state = state
            self.total_steps = trl_state.total_steps(state) or self.total_steps
            steps = trl_state.step_metrics(state)
            self._reward_names = {
                k.split("/")[1]
                for m in steps.values()
                for k in m
                if k.startswith("rewards/") and k.endswith("/mean") and k.count("/") == 2
            }
            self._weights = fit_weights(steps, sorted(self._reward_names)) or self._weights
        if not self.started:
            self.started = True
            out.append(
                RunStarted(
                    run_id=os.path.basename(self.folder),
                    config={},
                    start_step=0,
                    total_steps=self.total_steps,
                    device=DEVICE,
                    model=model_name(self.folder),
                    time=time.time(),
                )
            )
        out += warnings
        if state is not None:
            out += self._note_truncated(state)
            out += self._restarted(state)  # before the rollouts: it drops the later steps'
        out += self._new_rollouts()
        if state is not None:
            out += self._new_steps(state)
        result: list[Event] = []
        for event in out:
            result.append(event)
            result += self.monitor.observe(event)
            if self._weights and event.type in ("run_started", "rollouts"):
                # the alarms weigh the reward parts as the run did (run_started resets them)
                self.monitor.weights = {k: w for k, w in self._weights.items() if w > 0}
        return result

    def step_rows(self, step: int) -> list[dict] | None:
        """A step's rollout rows read again from its completions file, each with its prompt
        (a `RolloutStore.loader`: steps beyond the memory bound are paged from the parquet
        files); None when there is no such file or it cannot be read."""
        for found, path in completion_files(self.folder):
            if found == step:
                try:
                    _, prompts, rows = read_completions(
                        path, self._reward_names or None, self._weights
                    )
                except (OSError, ValueError, KeyError, TypeError):
                    return None
                return rows_with_prompts(rows, prompts)
        return None

    def problems(self) -> list[str]:
        """The files that stayed unreadable (reported once each as a warning)."""
        return [p for p, f in self._failures.items() if f.reported]

    # ------------------------------------------------------------------ files

    def _stamp(self, path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    def _failed(self, path: str, stamp: tuple[int, int], why: str) -> list[Event]:
        """Remember a failed read; a warning once the file looks damaged rather than busy."""
        old = self._failures.get(path)
        failure = _Failure(stamp, old.polls + 1 if old and old.stamp == stamp else 1)
        if old and old.stamp == stamp:
            failure.reported = old.reported
        self._failures[path] = failure
        stale = time.time() - stamp[1] / 1e9 >= STALE_S
        if failure.reported or not (stale or failure.polls >= BAD_POLLS):
            return []
        failure.reported = True
        name = os.path.relpath(path, self.folder)
        return [
            LogMessage(
                step=self.last_step,
                level="warning",
                message=f"{name} in the TRL run {self.folder} cannot be read ({why}), so what "
                "it holds is not shown. If TRL is still writing it, it appears at a later poll; "
                "otherwise the file is damaged (replace it from the machine that ran the "
                "training).",
            )
        ]

    def _newest_state(self) -> tuple[dict | None, list[Event]]:
        """The state with the most steps (the final one on a tie) of the top-level file and the
        newest checkpoint's that can be read (an older one while the newest is being written);
        files are re-read only when changed. Also the warnings about files that stay bad."""
        top = os.path.join(self.folder, trl_state.STATE_FILE)
        found: dict[str, dict] = {}
        warnings: list[Event] = []
        for path in trl_state.state_files(self.folder):
            if path != top and any(p != top for p in found):
                break  # the newest readable checkpoint is found
            stamp = self._stamp(path)
            if stamp is None:
                continue
            if self._stamps.get(path) == stamp and path in self._states:
                found[path] = self._states[path]
                continue
            try:
                found[path] = trl_state.read_state(path)
            except (OSError, ValueError) as exc:
                warnings += self._failed(path, stamp, _why(exc))
                continue
            self._failures.pop(path, None)
            self._stamps[path] = stamp
        self._states = found
        if not found:
            return None, warnings
        newest = max(
            found.values(),
            key=lambda s: (trl_state.global_step(s), trl_state.summary(s) is not None),
        )
        return newest, warnings

    def _new_rollouts(self) -> list[Event]:
        out: list[Event] = []
        for _, path in completion_files(self.folder):
            stamp = self._stamp(path)
            if stamp is None or self._stamps.get(path) == stamp:
                continue
            try:
                step, prompts, rows = read_completions(
                    path, self._reward_names or None, self._weights
                )
            except (OSError, ValueError, KeyError, TypeError) as exc:
                out += self._failed(path, stamp, _why(exc))
                continue
            self._failures.pop(path, None)
            self._stamps[path] = stamp
            out += self._note_long_file(path, step, len(rows))
            self._hists[step] = advantage_histogram([r["advantage"] for r in rows])
            if rows:
                self._totals[step] = sum(r["reward"] or 0.0 for r in rows) / len(rows)
            out.append(Rollouts(step=step, rows=rows, prompts=prompts))
        return out

    def _note_truncated(self, state: dict) -> list[Event]:
        """Once: that only the newest part of a long log history is shown, and from which step."""
        if not trl_state.truncated(state) or "log" in self._noted:
            return []
        steps = trl_state.step_metrics(state)
        if not steps:
            return []
        self._noted.add("log")
        first = min(steps)
        return [
            LogMessage(
                step=first,
                level="info",
                message=f"This TRL run's log history is long ({trl_state.global_step(state):,} "
                f"steps), so only its newest {trl_state.MAX_LOG_ENTRIES:,} entries are read: "
                f"the plots start at step {first:,}. The run's files are unchanged.",
            )
        ]

    def _note_long_file(self, path: str, step: int, read: int) -> list[Event]:
        """Once: that a completions file holds more rows than are read, and how many."""
        if read < MAX_ROWS or "rows" in self._noted:
            return []
        try:
            total = row_count(path)
        except (OSError, ValueError):
            return []
        if total <= read:
            return []
        self._noted.add("rows")
        return [
            LogMessage(
                step=step,
                level="info",
                message=f"{os.path.relpath(path, self.folder)} holds {total:,} rows, far more "
                f"than one logging step writes, so only its last {read:,} are shown in the "
                "Rollouts tab (the same for any other file this long).",
            )
        ]

    def _restarted(self, state: dict) -> list[Event]:
        """A resumed RunStarted when the log history is shorter than what was given out (the
        run was restarted from an earlier checkpoint: the later steps go)."""
        steps = trl_state.step_metrics(state)
        newest = max(steps, default=0)
        out: list[Event] = []
        if newest < self.last_step:
            out.append(
                RunStarted(
                    run_id=os.path.basename(self.folder),
                    config={},
                    start_step=newest,
                    total_steps=self.total_steps,
                    device=DEVICE,
                    model=model_name(self.folder),
                    resumed=True,
                    time=time.time(),
                )
            )
            self.last_step, self.finished = newest, False
            self.elapsed = sum(m.get("step_time") or 0.0 for s, m in steps.items() if s <= newest)
        return out

    def _new_steps(self, state: dict) -> list[Event]:
        out: list[Event] = []
        steps = trl_state.step_metrics(state)
        self.total_steps = trl_state.total_steps(state) or self.total_steps
        for step, metrics in steps.items():
            if step <= self.last_step:
                continue
            self.elapsed += metrics.get("step_time") or 0.0
            out.append(
                StepMetrics(
                    step=step,
                    total_steps=max(self.total_steps, step),
                    metrics=metrics,
                    advantage_hist=self._hists.get(step, {}),
                    elapsed=self.elapsed,
                )
            )
            out += self._note_weights(step, metrics)
            self.last_step = step
        end = trl_state.summary(state)
        if end is not None and not self.finished and self.last_step >= trl_state.global_step(state):
            self.finished = True
            runtime = end.get("train_runtime")
            out.append(
                RunFinished(
                    status="completed",
                    step=self.last_step,
                    message=f"TRL finished the run after {self.last_step} steps.",
                    elapsed=float(runtime) if isinstance(runtime, (int, float)) else 0.0,
                )
            )
        return out

    def _note_weights(self, step: int, metrics: dict) -> list[Event]:
        """Once: the reward weights worked out from the log (when not all 1), or that the rows'
        totals differ from the reward TRL logged in a way the log does not explain."""
        if self._weights_noted:
            return []
        weights = self._weights or {}
        if any(abs(w - 1.0) > 1e-6 for w in weights.values()):
            self._weights_noted = True
            parts = ", ".join(f"{name} × {w:g}" for name, w in weights.items())
            return [
                LogMessage(
                    step=step,
                    level="info",
                    message=f"This run weighs its reward functions ({parts}), worked out from "
                    "the rewards TRL logged (GRPOConfig.reward_weights is not in its files): "
                    "the Rollouts tab's totals use these weights.",
                )
            ]
        logged, rows = metrics.get("reward"), self._totals.get(step)
        if logged is None or rows is None or abs(logged - rows) <= 1e-4 * max(1.0, abs(logged)):
            return []
        self._weights_noted = True
        return [
            LogMessage(
                step=step,
                level="info",
                message=f"The Reward plot shows the reward TRL logged ({logged:.4g} at step "
                f"{step}); the Rollouts tab's total is the sum of the reward columns "
                f"({rows:.4g}): this run weighs its reward functions in a way its logs do not "
                "show (GRPOConfig.reward_weights).",
            )
        ]


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not whole JSON: {exc.msg} at line {exc.lineno}"
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
