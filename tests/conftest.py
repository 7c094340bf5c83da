"""Shared fixtures: offscreen Qt, no network, tiny models built locally once per session."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A randomly initialised ~0.1M-parameter Llama with the local character tokenizer."""
    from grpo_desktop.engine.tiny import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny-model")), "tiny", seed=0)


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory) -> str:
    from grpo_desktop.engine.tiny import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("micro-model")), "micro", seed=0)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Built-in models are cached under XDG_CACHE_HOME: keep the tests' cache out of the user's."""
    cache = tmp_path_factory.getbasetemp() / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
