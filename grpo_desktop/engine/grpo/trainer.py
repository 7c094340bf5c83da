"""The training loop: `train(config, control)` yields plain events while it trains.

    for event in train(cfg, TrainControl(), run_dir="runs/demo"):
        print(event.to_json())

One generator drives the CLI, the GUI worker and the tests. With a `run_dir` it also writes
`config.json`, appends every event to `events.jsonl` and saves checkpoints there; `resume=True`
continues from the newest checkpoint as if the run had never stopped (same batches, same
sampling, same schedule), after removing what was logged past that checkpoint. Every event also
goes through the health alarms (engine/health/monitors.py), whose alerts follow the event that
raised them. Errors never escape as exceptions: the run ends with RunFinished(status="failed")
and a message the user can act on. Stop finishes the current step, checkpoints and ends
"stopped"; pause waits between steps.

Try it:  grpo-desktop train --demo --out runs/demo
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from grpo_desktop.engine.config import TrainConfig, validate, warnings
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.data.dataset import Example, batch_indices, load_data, worked_example
from grpo_desktop.engine.errors import ConfigError, UserError
from grpo_desktop.engine.estimate.micro_batch import RowsPerPass
from grpo_desktop.engine.events import (
    CheckpointSaved,
    Event,
    LogMessage,
    Rollouts,
    RunFinished,
    RunStarted,
    StepMetrics,
    truncate_events_after,
)
from grpo_desktop.engine.grpo.evaluate import evaluate
from grpo_desktop.engine.grpo.loss import advantage_histogram, group_has_spread
from grpo_desktop.engine.grpo.step import StepOutput, grpo_step, sample_groups, select_groups
from grpo_desktop.engine.grpo.update_threads import UpdateThreads
from grpo_desktop.engine.health.checker_watch import CheckerWatch
from grpo_desktop.engine.health.monitors import HealthMonitor, logged_events
from grpo_desktop.engine.models.gguf_import import ImportStopped
from grpo_desktop.engine.models.loading import Policy, load_policy, model_import_events
from grpo_desktop.engine.models.remote_code import RemoteCodePermission
from grpo_desktop.engine.ops import (
    fused_attention,
    fused_layers,
    grouped_attention,
    kernels,
    native,
)
from grpo_desktop.engine.ops.host_memory import collect_cycles, keep_freed_heap
from grpo_desktop.engine.rewards.functions import RewardSet
from grpo_desktop.engine.rewards.worked_example import example_warnings
from grpo_desktop.engine.runs import checkpoint as ckpt
from grpo_desktop.engine.runs.files import events_path, write_config
from grpo_desktop.engine.sampling import precision as sampling_precision
from grpo_desktop.engine.sampling.rollout import overlong_prompts

HINT_EVERY = 20


def make_scheduler(optimizer, cfg: TrainConfig):
    """The learning-rate schedule: a factor on `learning_rate` for each optimizer update.

    `update` below counts optimizer updates from 0: num_iterations of them per training step
    (each batch is used for that many updates), so the settings, given in training steps, are
    counted in updates: W = warmup_steps × num_iterations, U = max_steps × num_iterations (as
    the TRL export counts them). Three regimes, in order:

    1. Warm-up, while update < W: (update + 1) / W, so the first update already moves (1 / W)
       and the last warm-up update runs at the full rate.
    2. After warm-up, by `lr_scheduler`, over progress p = (update - W) / (U - W) from 0 to 1:
       "constant" keeps 1; "linear" is 1 - p, reaching 0 after the last update; "cosine" is
       (1 + cos(pi * p)) / 2, flat at both ends.
    3. Past U (a run continued past its max_steps), p stays 1: the rate stays where the
       schedule ends, 0 for linear and cosine.
    """
    a = cfg.algorithm
    warm = a.warmup_steps * a.num_iterations  # W, in updates
    total = cfg.run.max_steps * a.num_iterations  # U, in updates

    def factor(update: int) -> float:
        if warm and update < warm:
            return (update + 1) / warm
        progress = (update - warm) / max(1, total - warm)
        progress = min(max(progress, 0.0), 1.0)
        if a.lr_scheduler == "linear":
            return 1.0 - progress
        if a.lr_scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def step_seed(seed: int, step: int) -> int:
    """Seed for sampling at `step`: resumed runs sample exactly as uninterrupted ones."""
    # Seeding per step, not once per run: the random stream of step k would otherwise depend on
    # every draw before it, which a run resumed at k never made. Two primes keep (seed, step)
    # pairs apart: seed 1 at step 2 does not sample like seed 2 at step 1.
    return (seed * 1_000_003 + step * 7919) % (2**31 - 1)


class _EventLog:
    """Appends events to RUN/events.jsonl; opened at the first event, after a resume has trimmed
    what was logged past the restored checkpoint. A line the disk has no room for is undone (the
    file is cut back to its last whole line) and the error raised; after one failure, writes are
    best effort (the run's last event is logged if there is room again), never raising twice."""

    def __init__(self, run_dir: str | None):
        self.run_dir = run_dir
        self.fh = None
        self.failed = False

    def write(self, event: Event, sync: bool = False) -> Event:
        if not self.run_dir:
            return event
        try:
            if self.fh is None:
                os.makedirs(self.run_dir, exist_ok=True)
                # Unbuffered: each event reaches the file as it is yielded, so the window's run
                # folder view and a crash both see the log up to the last finished event.
                self.fh = open(events_path(self.run_dir), "ab", buffering=0)  # noqa: SIM115
            start = self.fh.seek(0, os.SEEK_END)
            data = memoryview((event.to_json() + "\n").encode("utf-8"))
            try:
                while data:  # a raw write may take only part of the line
                    data = data[self.fh.write(data) :]
                if sync:
                    os.fsync(self.fh.fileno())
            except OSError:
                # A torn line in the middle of the log would make a resume refuse it: cut it off.
                with contextlib.suppress(OSError):
                    os.ftruncate(self.fh.fileno(), start)
                raise
        except OSError:
            if self.failed:
                return event
            self.failed = True
            raise
        return event

    def finish(self, event: Event) -> Event:
        """Log the run's last event if there is room; never raises (the run ends either way)."""
        self.failed = True
        return self.write(event, sync=True)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def train(
    config: TrainConfig,
    control: TrainControl | None = None,
    *,
    run_dir: str | None = None,
    resume: bool = False,
    remote_code: RemoteCodePermission | None = None,
) -> Iterator[Event]:
    """Run GRPO as `config` says, yielding events. See the module docstring. `remote_code` is
    the permission to run the model's own code (engine/models/remote_code.py), from whoever asked."""
    control = control or TrainControl()
    log = _EventLog(run_dir)
    state = _Progress(step=0, t0=time.time())
    run = _Run(config, control, run_dir, resume, state)
    run.remote_code = remote_code
    health = HealthMonitor()  # the health alarms (engine/health/monitors.py) read every event
    try:
        for event in run.events():
            if isinstance(event, RunStarted) and event.resumed and run_dir:
                # The alarms judge trends: a resumed run picks up the history it continues.
                health.replay(logged_events(events_path(run_dir)))
            # A checkpoint's event is forced to disk: once the log says a checkpoint exists,
            # every event before it is there too, and a resume finds the log it expects.
            yield log.write(event, sync=isinstance(event, CheckpointSaved))
            for alert in health.observe(event):
                yield log.write(alert)
    except UserError as exc:
        yield log.finish(_finished("failed", state, str(exc), None))
    except torch.OutOfMemoryError as exc:
        msg = (
            "Out of memory. Lower the group size G, prompts per step B, max completion tokens or "
            "the micro-batch size (0 = auto halves it by itself), or use 4-bit quantization and "
            "gradient checkpointing."
        )
        yield log.finish(_finished("failed", state, msg, str(exc)))
    except Exception as exc:  # a bug: report it with its traceback, keep the app alive
        if run_dir and ckpt.is_disk_full(exc, run_dir):  # not a bug: events.jsonl, config.json
            yield log.finish(_finished("failed", state, str(ckpt.disk_full_error(run_dir)), None))
            return
        msg = f"Training failed with an internal error: {type(exc).__name__}: {exc}"
        yield log.finish(_finished("failed", state, msg, traceback.format_exc()))
    finally:
        # Also when the consumer stops iterating early (GeneratorExit): the models and the
        # checker's process are freed either way.
        log.close()
        run.close()


@dataclass
class _Progress:
    """How far the run got, read by `train` when it ends, however it ends."""

    step: int  # the last finished step
    t0: float  # wall-clock start, for the run's elapsed time


def _finished(status: str, state: _Progress, message: str, error: str | None) -> RunFinished:
    return RunFinished(status, state.step, message, error, time.time() - state.t0)


class _Run:
    """State of one run; `events()` is the loop body of `train`."""

    def __init__(self, cfg, control, run_dir, resume, state: _Progress):
        self.cfg = cfg
        self.control = control
        self.run_dir = run_dir
        self.resume = resume
        self.state = state
        self.policy: Policy | None = None
        self.rewards: RewardSet | None = None
        self.rows = RowsPerPass(cfg.algorithm.micro_batch_size)  # auto learns from OOMs
        self.threads: UpdateThreads | None = None  # the passes' CPU threads, learnt as it runs
        self.hinted: dict[str, int] = {}
        self.remote_code: RemoteCodePermission | None = None
        self.notes: list[str] = []  # warnings for the log once the run has started

    def close(self) -> None:
        if self.rewards is not None:
            self.rewards.close()
        self.policy = None
        collect_cycles()  # modules can hold reference cycles: free them so the cache can be emptied
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _setup(self):
        cfg = self.cfg
        problems = validate(cfg)
        if problems:
            raise ConfigError("The settings need fixing:\n- " + "\n- ".join(problems))
        start_step, point = 0, None
        if self.resume:
            if not self.run_dir:
                raise UserError("Resuming needs the run folder to continue from.")
            point, skipped = ckpt.find_resume_point(self.run_dir)  # the newest intact one
            if point is not None:
                start_step = point.step
                self.notes += [ckpt.skipped_message(s, point) for s in skipped]
            # What was logged after the checkpoint is redone: drop it so each step appears once.
            truncate_events_after(events_path(self.run_dir), start_step)
        data = load_data(cfg.data, seed=cfg.run.seed)
        if not data.train:
            raise UserError("The dataset has no training rows left after the held-out split.")
        adapter = weights = None
        if point is not None:
            path, is_adapter = point.weights
            adapter, weights = (path, None) if is_adapter else (None, path)
        torch.manual_seed(cfg.run.seed)  # LoRA initialisation is random: make it repeatable
        # The reference for the KL term is the model as loaded here, before any step: with LoRA,
        # the same model with its adapter disabled (models/loading.py), so it costs no memory.
        try:
            self.policy = load_policy(cfg, adapter, weights, remote_code=self.remote_code)
        except (UserError, torch.OutOfMemoryError):
            raise
        except Exception as exc:  # the checkpoint's weights, not a bug: name them
            if point is None:
                raise
            what = f"the weights cannot be loaded ({type(exc).__name__}: {exc})"
            raise ckpt.DamagedCheckpoint(point.folder, os.path.basename(path), what) from exc
        if self.policy.device.type == "cpu":
            keep_freed_heap()  # each step reuses the last one's pages (ops/host_memory.py)
            grouped_attention.use_on_cpu()  # no copies of grouped key/value heads per pass
            fused_attention.use_on_cpu()  # the passes' attention in the fused kernels
            fused_layers.use_on_cpu()  # and their norms, rotary embedding and SwiGLU gate
        self.rewards = RewardSet(self.cfg.rewards, self.cfg.data)
        self.watch = CheckerWatch(self.cfg.rewards.checker_timeout_s)
        params = self.policy.trainable_parameters()
        a = self.cfg.algorithm
        optimizer = torch.optim.AdamW(params, lr=a.learning_rate, weight_decay=a.weight_decay)
        scheduler = make_scheduler(optimizer, self.cfg)
        if point is not None:
            ckpt.load_training_state(point, optimizer, scheduler)
        if self.run_dir:
            write_config(self.run_dir, self.cfg)
        return data, optimizer, scheduler, start_step

    def events(self) -> Iterator[Event]:
        cfg, control, state = self.cfg, self.control, self.state
        try:  # a GGUF model is imported once, with progress; Stop stops the import too
            yield from model_import_events(cfg, should_stop=control.should_stop)
        except ImportStopped as exc:
            yield _finished("stopped", state, str(exc), None)
            return
        data, optimizer, scheduler, start_step = self._setup()
        policy = self.policy
        state.step = start_step
        total, params = cfg.run.max_steps, policy.num_parameters()
        yield RunStarted(
            run_id=uuid.uuid4().hex[:12],
            config=cfg.to_dict(),
            start_step=start_step,
            total_steps=total,
            device=_device_name(policy.device),
            model=policy.name,
            num_parameters=params[0],
            num_trainable=params[1],
            resumed=start_step > 0,
            time=time.time(),
        )
        if policy.source_note:  # a model imported from a GGUF: where from, what 4 bits cost
            yield LogMessage(start_step, "info", policy.source_note)
        sampling = sampling_precision.describe_for(policy, cfg.model.sampling_precision)
        if sampling:  # bfloat16 sampling asked for: on or not, and why
            yield LogMessage(start_step, "info", sampling)
        if native.will_compile(policy.device, policy.dtype):  # once per machine: say why it waits
            yield LogMessage(start_step, "info", native.COMPILING)
        fused = native.describe_for(policy.device, policy.dtype)
        if fused:  # the CPU decode's fused kernels: built (how long), loaded, or why not
            yield LogMessage(start_step, "info", fused)
        for text in [*self.notes, *warnings(cfg), *example_warnings(cfg)]:
            yield LogMessage(start_step, "warning", text)
        if data.skipped:  # rows with an empty prompt or answer
            yield LogMessage(start_step, "warning", data.skipped)
        if self.rewards.checker_protections:  # what the custom checker's sandbox holds back here
            yield LogMessage(start_step, "info", self.rewards.checker_protections)
        cut = _overlong_warning(policy.tokenizer, data.train, cfg)
        if cut:
            yield LogMessage(start_step, "warning", cut)
        if start_step == 0 and data.eval:  # the baseline; a resumed run has it in its log
            yield evaluate(policy, data.eval, cfg, step=0)
        last_ckpt_time, last_saved = time.time(), start_step
        status = "completed"
        for step in range(start_step + 1, total + 1):
            control.wait_if_paused()
            # Checked before the step as well: a stop sent while paused starts nothing new.
            if control.should_stop(step - 1):
                status = "stopped"
                break
            t0 = time.perf_counter()
            torch.manual_seed(step_seed(cfg.run.seed, step))
            out = self._step(data.train, step, optimizer, scheduler)
            state.step = step
            out.metrics["step_time"] = time.perf_counter() - t0
            for note in out.notes:  # a halved micro-batch, once when it happens
                yield LogMessage(step, "warning", note)
            yield Rollouts(step, out.rows, out.prompts)
            yield StepMetrics(
                step,
                total,
                out.metrics,
                advantage_histogram(out.advantages),
                time.time() - state.t0,
            )
            yield from self._hints(step, out.metrics)
            stop_message = None
            if "custom" in self.rewards.names:
                alerts, stop_message = self.watch.after_step(step, [r["error"] for r in out.rows])
                yield from alerts
            if stop_message:
                status = "failed"
                break
            if data.eval and cfg.run.eval_every and step % cfg.run.eval_every == 0 and step < total:
                yield evaluate(policy, data.eval, cfg, step=step)
            # The checkpoint comes last in the step, after its evaluation: a run resumed from it
            # keeps every event of this step and redoes none. Besides every checkpoint_every
            # steps, one is due after checkpoint_minutes, so a slow run never risks hours.
            minutes = cfg.run.checkpoint_minutes
            due_time = minutes > 0 and time.time() - last_ckpt_time >= minutes * 60
            if step % cfg.run.checkpoint_every == 0 or due_time:
                yield self._save(step, optimizer, scheduler)
                last_ckpt_time, last_saved = time.time(), step
            if control.should_stop(step) and step < total:  # a stop on the last step: completed
                status = "stopped"
                break
        step = state.step
        if step > last_saved:  # a stopped or finished run can always be resumed or exported
            yield self._save(step, optimizer, scheduler)
        if status == "completed" and data.eval:
            yield evaluate(policy, data.eval, cfg, step=step)
        message = "Finished all steps." if status == "completed" else f"Stopped after step {step}."
        if status == "failed":
            message = stop_message
        yield RunFinished(status, step, message, None, time.time() - state.t0)

    def _step(self, train: list[Example], step: int, optimizer, scheduler) -> StepOutput:
        cfg, policy = self.cfg, self.policy
        a, seed = cfg.algorithm, cfg.run.seed
        B, G = a.prompts_per_step, a.num_generations
        idx = batch_indices(len(train), step - 1, B, seed)
        groups = sample_groups(policy, [train[i] for i in idx], cfg, self.rewards)
        if self.threads is None:
            self.threads = UpdateThreads(policy.device)
        if not a.dynamic_sampling:
            return grpo_step(policy, optimizer, scheduler, groups, cfg, self.rows, self.threads)
        # Dynamic sampling (DAPO): a group whose rewards are all equal has zero advantages and
        # adds nothing to the gradient, yet it counts in the loss's averages and so dilutes the
        # groups that do teach. Such groups are dropped and more problems sampled to refill B.
        parts, keep = [groups], [group_has_spread(groups.totals, G)]  # keep: (B,) bool per round
        frac_zero = 1.0 - float(keep[0].float().mean())  # of what was sampled, before dropping
        for round_ in range(1, a.max_resample_rounds + 1):
            if int(sum(int(k.sum()) for k in keep)) >= B:
                break
            # Extra rounds draw with their own seeds, so step k's refills are as repeatable as
            # its first batch (a resumed run draws the same).
            extra_seed = seed + 104_729 * round_
            idx = batch_indices(len(train), step - 1, B, extra_seed)
            part = sample_groups(policy, [train[i] for i in idx], cfg, self.rewards)
            parts.append(part)
            keep.append(group_has_spread(part.totals, G))
        kept_total = sum(int(k.sum()) for k in keep)
        if kept_total == 0:  # nothing to learn from: train on the original batch (zero advantages)
            chosen = groups
        else:
            budget = B
            for k in keep:  # keep at most B groups, in sampling order
                ones = torch.nonzero(k).flatten()
                k[ones[budget:]] = False
                budget = max(0, budget - len(ones))
            chosen = select_groups(parts, keep, G, policy.tokenizer.pad_token_id)
        out = grpo_step(policy, optimizer, scheduler, chosen, cfg, self.rows, self.threads)
        out.metrics["frac_reward_zero_std"] = frac_zero
        return out

    def _hints(self, step: int, m: dict) -> Iterator[LogMessage]:
        """Teach as the run goes: say when a step could not teach anything (at most every
        HINT_EVERY steps per kind, so the log stays readable)."""
        for kind, active, level, text in (
            (
                "no_signal",
                m.get("frac_reward_zero_std", 0.0) >= 0.999,
                "info",
                "Every group scored the same (all right or all wrong), so every advantage is 0 and "
                "this step taught nothing. If this keeps happening, use problems closer to the "
                "model's ability, a larger group size, or a higher temperature.",
            ),
            (
                "all_truncated",
                m.get("completions/clipped_ratio", 0.0) >= 0.999,
                "warning",
                "Every completion hit the length limit before finishing. Raise max completion "
                "tokens, or the model cannot reach its answer.",
            ),
        ):
            last = self.hinted.get(kind)
            if active and (last is None or step - last >= HINT_EVERY):
                self.hinted[kind] = step
                yield LogMessage(step, level, text)

    def _save(self, step: int, optimizer, scheduler) -> CheckpointSaved:
        if not self.run_dir:
            return CheckpointSaved(step, "")
        path = ckpt.save_checkpoint(
            self.run_dir,
            step,
            self.policy,
            optimizer,
            scheduler,
            {  # with the step, all a resume needs to draw the same batches (batch_indices)
                "seed": self.cfg.run.seed,
                "data_position": step * self.cfg.algorithm.prompts_per_step,
            },
            keep=self.cfg.run.keep_checkpoints,
        )
        return CheckpointSaved(step, os.path.relpath(path, self.run_dir))


def _overlong_warning(tokenizer, train: list[Example], cfg: TrainConfig) -> str:
    """Say how many training prompts are longer than the prompt limit, and which: they lose
    their beginning (left truncation), which the user would otherwise never see."""
    limit = cfg.data.max_prompt_length
    problems, example = [ex.problem for ex in train], worked_example(cfg.data)
    cut = overlong_prompts(
        tokenizer,
        problems,
        limit,
        cfg.data.system_prompt,
        example=example,
        prefix=cfg.data.answer_prefix,
    )
    if not cut:
        return ""
    shown = ", ".join(f"#{i + 1} ({n:,} tokens: {_snippet(train[i].problem)})" for i, n in cut[:3])
    more = f" and {len(cut) - 3:,} more" if len(cut) > 3 else ""
    return (
        f"{len(cut):,} of {len(train):,} training prompts are longer than the prompt limit of "
        f"{limit:,} tokens and lose their beginning: {shown}{more}. Raise 'Max prompt tokens' "
        "(data.max_prompt_length), or shorten or remove those rows."
    )


def _snippet(text: str, width: int = 40) -> str:
    flat = " ".join(text[: width * 4].split())
    return repr(flat[:width].rstrip() + ("…" if len(flat) > width else ""))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads, {kernels.library()})"  # engine/ops/kernels.py
