"""Made-up training events and a fake train function with the engine's signature, for tests of
the window, the worker and the session history that need a run but not a model."""

from __future__ import annotations

import contextlib
import os


def fake_events(
    step: int, total: int, B: int = 2, G: int = 4, error_every: int = 0, unscored: int = 0
) -> list:
    """One step of a made-up run: B groups of G rollouts (group 0 has no spread, the others
    alternate 1 and 0, so their advantages are ±1) and its metrics. Prompts are stored once per
    group, as the engine does. `unscored` rows at the end of the last group have no score (the
    checker timed out), as the engine writes them."""
    from grpo_desktop.engine.events import Rollouts, StepMetrics

    rows = []
    for g in range(B):
        for i in range(G):
            reward = 0.0 if g == 0 else float(i % 2)
            error = (
                "check() raised ValueError at line 2: bad"
                if error_every and i % error_every == 0
                else None
            )
            rows.append(
                {
                    "group": g,
                    "completion": f"<think>step {step} try {i}</think><answer>{step * g + i}</answer>",
                    "answer": str(step * g),
                    "rewards": {"accuracy": reward, "format": 1.0},
                    "reward": reward + 0.2,
                    "advantage": 0.0 if g == 0 else (1.0 if reward else -1.0),
                    "length": 10 + i,
                    "truncated": i == G - 1,
                    "error": error,
                }
            )
    for row in rows[len(rows) - unscored :] if unscored else []:
        row.update(
            rewards={"accuracy": None, "format": None},
            reward=None,
            advantage=None,
            error="check() timed out after 5.0 s",
        )
    prompts = [f"What is {step} × {g}?" for g in range(B)]
    spread = (B - 1) / B
    metrics = {
        "reward": 0.2 + 0.5 * spread,
        "reward_std": 0.5 * spread,
        "rewards/accuracy/mean": 0.5 * spread,
        "rewards/format/mean": 1.0,
        "frac_reward_zero_std": 1 / B,
        "kl": 0.01 * step,
        "entropy": 1.0 / step,
        "loss": 0.0,
        "grad_norm": 0.5,
        "learning_rate": 1e-3,
        "completions/mean_length": 11.5,
        "completions/min_length": 10,
        "completions/max_length": 10 + G - 1,
        "completions/clipped_ratio": 1 / G,
        "step_time": 0.01,
    }
    hist = {"edges": [-1.5, -0.5, 0.5, 1.5], "counts": [B * G // 4, G, B * G // 4]}
    return [
        Rollouts(step, rows, prompts),
        StepMetrics(step, total, metrics, hist, elapsed=0.01 * step),
    ]


@contextlib.contextmanager
def event_log(run_dir: str | None):
    """`emit(event) -> event` that also appends it to RUN/events.jsonl when given a folder, as
    the engine does (for fake train functions)."""
    import json

    log = None
    if run_dir:
        os.makedirs(run_dir, exist_ok=True)
        log = open(os.path.join(run_dir, "events.jsonl"), "a", encoding="utf-8")  # noqa: SIM115

    def emit(event):
        if log is not None:
            log.write(json.dumps(event.to_dict()) + "\n")
            log.flush()
        return event

    try:
        yield emit
    finally:
        if log is not None:
            log.close()


def make_fake_train(
    delay: float = 0.0, fail_message: str | None = None, error_every: int = 0, unscored: int = 0
):
    """A train function with the engine's signature that yields made-up events quickly, honours
    pause and stop like the engine (between steps), and writes events.jsonl when given a folder."""
    import time

    from grpo_desktop.engine.events import RunFinished, RunStarted

    def train(config, control, run_dir=None, resume=False):
        with event_log(run_dir) as emit:
            if fail_message:
                yield emit(RunFinished("failed", 0, fail_message, None))
                return
            total = config.run.max_steps
            B, G = config.algorithm.prompts_per_step, config.algorithm.num_generations
            yield emit(
                RunStarted("fake", config.to_dict(), 0, total, "cpu (fake)", "fake-model", 10, 1)
            )
            status, step = "completed", 0
            for step in range(1, total + 1):
                control.wait_if_paused()
                if control.should_stop(step - 1):
                    step -= 1
                    status = "stopped"
                    break
                for event in fake_events(step, total, B, G, error_every, unscored):
                    yield emit(event)
                if delay:
                    time.sleep(delay)
                if control.should_stop(step) and step < total:
                    status = "stopped"
                    break
            yield emit(RunFinished(status, step, f"{status} at {step}", None))

    return train
