"""The Model panel's GGUF note follows the import a run makes (issue 25 §4): found on
SmolLM2, whose note still said "Imported once, when first used" after the run had imported it.
The real window trains one step on a small GGUF written by the app's exporter
(tests/support/ollama_layout.py); the import happens before the run starts. 10 s, so slow."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.ui.main_window import MainWindow
from tests.support.ollama_layout import small_gguf

FIRST_USE = "Imported once, when first used"
DONE = "Already imported into the app's cache."


@pytest.mark.slow  # 10 s: the small GGUF written and imported, one real step
def test_the_gguf_note_says_imported_once_the_run_imported_it(
    qtbot, show_window, tmp_path, monkeypatch
):
    monkeypatch.setenv("GRPO_DESKTOP_MODEL_CACHE", str(tmp_path / "cache"))
    gguf = small_gguf(str(tmp_path / "gguf"))[0]
    cfg = TrainConfig().replace(
        model={"name_or_path": gguf, "device": "cpu"},
        lora={"enabled": True, "r": 4, "alpha": 8},
        data={"source": "arithmetic", "arithmetic_difficulty": 1, "eval_size": 0},
        algorithm={"num_generations": 2, "prompts_per_step": 1, "max_completion_length": 4},
        run={"max_steps": 1, "eval_every": 0, "checkpoint_every": 100},
    )
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(cfg, settings=settings, probe_device=False))
    note = w.model_panel.gguf_note
    assert FIRST_USE in note.text() and DONE not in note.text()
    finished = []
    w.model.run_finished.connect(finished.append)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: bool(finished), timeout=120_000)
    assert finished[0].status == "completed", finished[0]
    qtbot.waitUntil(lambda: not w.model.runner.active, timeout=60_000)
    assert DONE in note.text() and FIRST_USE not in note.text(), note.text()
