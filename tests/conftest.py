"""Shared fixtures for every test: no network, tiny models built locally once per session, the
user's folders kept out of reach. Qt-free: `pytest tests/engine tests/session` runs without
PySide6; the Qt guards and window fixtures are in tests/support/qt_guard.py, used by the
conftests of tests/ui, tests/cli and tests/scenarios.

torch runs one intra-op thread here (OMP_NUM_THREADS=1 unless set; the CLI subprocesses inherit
it): the tests' models are tiny, and with two threads every small product waits at a thread
barrier, which on 2 busy cores (a checker child, a GUI thread, other jobs) cost test_trainer.py
117 s against 34 s with one."""

from __future__ import annotations

import os

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
    # An installation from source compiles its own kernels; only the bundle tests name a bundle.
    monkeypatch.delenv("GRPO_DESKTOP_BUNDLED_KERNELS", raising=False)


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Untitled sessions, autosaves, crash markers and trusted checkers live in the user's data
    and config folders: give every test its own, so tests never touch (or see) the user's."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("GRPO_DESKTOP_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("GRPO_DESKTOP_CONFIG_DIR", str(home / "config"))


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
def two_threads():
    """torch on two threads for the test (the suite runs on one: OMP_NUM_THREADS above), as a
    2-core machine runs the app; the count before is put back after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
