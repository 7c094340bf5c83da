"""Shared fixtures: offscreen Qt, no network, tiny models built locally once per session; in tests
that use Qt, any Qt warning and any QThread left running fail the test.

torch runs one intra-op thread here (OMP_NUM_THREADS=1 unless set; the CLI subprocesses inherit
it): the tests' models are tiny, and with two threads every small product waits at a thread
barrier, which on 2 busy cores (a checker child, a GUI thread, other jobs) cost test_trainer.py
117 s against 34 s with one."""

from __future__ import annotations

import contextlib
import gc
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported (see above)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A randomly initialised ~0.1M-parameter Llama with the local character tokenizer."""
    from grpo_desktop.engine.models.tiny import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny-model")), "tiny", seed=0)


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory) -> str:
    from grpo_desktop.engine.models.tiny import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("micro-model")), "micro", seed=0)


@pytest.fixture(scope="session")
def shaped_model_dir(tmp_path_factory):
    """shaped_model_dir(name, favour=None) -> folder: a realistic-shape model (engine/models/shapes.py),
    built once per test session for each (name, favour)."""
    from grpo_desktop.engine.models.shapes import build_shaped

    built: dict[tuple[str, str | None], str] = {}

    def get(name: str, favour: str | None = None) -> str:
        if (name, favour) not in built:
            folder = str(tmp_path_factory.mktemp(name))
            built[name, favour] = build_shaped(folder, name, favour=favour)
        return built[name, favour]

    return get


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """trained_run(lora=False, steps=2) -> run folder: the built-in demo model trained for real
    (engine.grpo.trainer.train) for `steps` steps, a checkpoint after each (the last two kept), built
    once per test session for each setting. lora=False is the demo's full fine-tuning; True
    trains a LoRA adapter on it instead. Small: G 4, B 2, the demo's 160 completion tokens, 8 held-out problems, a few seconds a step."""
    built: dict[tuple[bool, int], str] = {}

    def get(lora: bool = False, steps: int = 2) -> str:
        if (lora, steps) not in built:
            from grpo_desktop.engine.config.demo import demo_config
            from grpo_desktop.engine.grpo.trainer import train

            run_dir = str(tmp_path_factory.mktemp("lora-run" if lora else "demo-run"))
            cfg = demo_config().replace(
                lora={"enabled": lora, "r": 8, "alpha": 16},
                data={"eval_size": 8},
                algorithm={
                    "num_generations": 4,
                    "prompts_per_step": 2,
                    "learning_rate": 5e-3 if lora else 2e-4,
                },
                run={"max_steps": steps, "eval_every": 0, "checkpoint_every": 1, "seed": 1},
            )
            events = list(train(cfg, run_dir=run_dir))
            assert events[-1].status == "completed", events[-1]
            built[lora, steps] = run_dir
        return built[lora, steps]

    return get


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Built-in models are cached under XDG_CACHE_HOME: keep the tests' cache out of the user's."""
    cache = tmp_path_factory.getbasetemp() / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Untitled sessions, autosaves, crash markers and trusted checkers live in the user's data
    and config folders: give every test its own, so tests never touch (or see) the user's."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("GRPO_DESKTOP_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("GRPO_DESKTOP_CONFIG_DIR", str(home / "config"))


# Said by Qt's offscreen platform plugin itself whenever a top-level window is shown; it is about
# the headless test platform, not about anything the app does.
QT_PLATFORM_NOISE = (
    "This plugin does not support propagateSizeHints()",
    # the offscreen platform cannot raise a window that is shown already, or grab the keyboard
    # for a popup menu (a context menu in the tests)
    "This plugin does not support raise()",
    "This plugin does not support grabbing the keyboard",
)


@pytest.fixture(autouse=True)
def _qt_strict(request):
    """Qt warnings fail the test (a message handler collects them), and so does a QThread still
    running at the end of the test (checked for every test once Qt is loaded)."""
    if "PySide6.QtCore" not in sys.modules:
        yield
        return
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    problems: list[str] = []
    previous = None

    def handler(kind, context, message):
        serious = kind not in (QtMsgType.QtDebugMsg, QtMsgType.QtInfoMsg)
        if serious and not any(noise in message for noise in QT_PLATFORM_NOISE):
            problems.append(f"{kind.name}: {message}")
        if previous is not None:
            previous(kind, context, message)

    previous = qInstallMessageHandler(handler)
    try:
        yield
    finally:
        leaked = _running_qthreads(deep=request.node.module.__name__.startswith("test_ui_"))
        qInstallMessageHandler(previous)
    if leaked:
        pytest.fail(f"the test left {len(leaked)} QThread(s) running: {leaked}")
    if problems:
        pytest.fail("Qt warnings during the test:\n" + "\n".join(problems))


def _running_qthreads(deep: bool) -> list[str]:
    """Names of QThreads still running; background jobs get a few seconds to finish first.
    `deep` also scans every live QThread wrapper (slower, so only for the UI tests)."""
    found = []
    if "grpo_desktop.ui.common.tasks" in sys.modules:
        from grpo_desktop.ui.common import tasks

        if not tasks.wait_for_all(10_000):
            found.append(f"{tasks.active_jobs()} background job(s)")
    if "grpo_desktop.ui.run.worker" in sys.modules:
        from grpo_desktop.ui.run.worker import live_threads

        for thread in live_threads():
            found.append(thread.objectName() or "training thread")
    if deep:
        from PySide6.QtCore import QThread

        for obj in gc.get_objects():
            try:
                running = issubclass(type(obj), QThread) and obj.isRunning()
            except RuntimeError:  # the C++ object is already deleted
                running = False
            if running:
                name = obj.objectName() or repr(obj)
                if name not in found:
                    found.append(name)
                obj.quit()  # so that the next test is not blamed for this one's thread
                obj.wait(2000)
    return found


@pytest.fixture
def choose_linear(monkeypatch):
    """choose_linear("0" | "1" | ""): engine/ops/kernels.py decides afresh with GRPO_DESKTOP_ONEDNN
    set so (off, on without the timing, or by the timing); its earlier decision is put back
    after the test."""
    from grpo_desktop.engine.ops import kernels

    saved = dict(kernels._state)

    def choose(setting: str) -> None:
        kernels._state.clear()
        monkeypatch.setenv(kernels.ENV, setting)

    yield choose
    kernels._state.clear()
    kernels._state.update(saved)


@pytest.fixture
def show_window(qtbot):
    """Show a MainWindow for a test: `show_window(w)` answers its "stop the run?" and "save
    changes?" questions (no modal dialogs in tests), shows it and returns it; after the test any
    run still going is stopped and waited for."""
    windows = []

    def show(w):
        w.ask_stop_on_close = lambda: True
        w.session.ask_save_changes = lambda _name: "discard"
        qtbot.addWidget(w)
        w.show()
        windows.append(w)
        return w

    yield show
    for w in windows:
        if w.model.runner.active:
            w.model.stop()
            qtbot.waitUntil(lambda w=w: not w.model.runner.active, timeout=60_000)


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
