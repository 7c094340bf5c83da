"""Exports people can use at once (issue 27 §5), met in the Export dialog as a user meets it:

- the folder it suggests is a new one in 'Demo exports' beside the session (not beside it in a
  hidden data folder), and a second export gets a new name instead of asking to replace;
- a GGUF export names its file Demo-step2-f16.gguf (the outtype once), and its Modelfile carries
  the system prompt and the worked example the run trained with (SYSTEM, MESSAGE lines);
- the size it shows for a TRL project is the size of the folder it writes, measured off the GUI
  thread.

The run is a real 2-step demo run with a worked example (full fine-tuning, small settings).
"""

from __future__ import annotations

import os
import shutil

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.units import folder_bytes, size_text
from grpo_desktop.session.document import new_session, save_session
from tests.support.export_runs import small_demo, train_run

EXAMPLE = ("What is 11 * 12?", "<think>11 * 12 = 132</think><answer>132</answer>")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> str:
    cfg = small_demo(lora=False).replace(
        run={"max_steps": 2},
        data={"example_problem": EXAMPLE[0], "example_answer": EXAMPLE[1]},
    )
    return train_run(cfg, str(tmp_path_factory.mktemp("usable") / "run"))


@pytest.fixture
def window(show_window, demo_run, tmp_path):
    if any(part.startswith(".") for part in tmp_path.parts):
        pytest.skip("the temporary folder is itself in a hidden folder")
    from grpo_desktop.engine.export.plan import read_config
    from grpo_desktop.ui.main_window import MainWindow
    from tests.support.fakes import make_fake_train

    doc = new_session(str(tmp_path / "work" / "Demo.grpo"), read_config(demo_run))
    shutil.copytree(demo_run, doc.run_dir)
    doc.trained = True
    save_session(doc)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(
        MainWindow(doc.config, make_fake_train(delay=0.3), settings=settings, probe_device=False)
    )
    assert w.session.open_session(doc.path)
    return w


def _dialog(qtbot, window):
    from grpo_desktop.ui.export.dialog import ExportDialog

    dialog = ExportDialog(window.model, window)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def _export(qtbot, dialog) -> dict:
    dialog.export_button.click()
    qtbot.waitUntil(lambda: not dialog.runner.busy, timeout=120_000)
    assert dialog.result is not None, dialog.status.text()
    return dialog.result


def test_a_gguf_export_lands_beside_the_session_ready_for_ollama(qtbot, window, tmp_path):
    dialog = _dialog(qtbot, window)
    dialog.set_format("gguf", "f16")
    exports = tmp_path / "work" / "Demo exports"
    assert dialog.out_edit.text() == str(exports / "Demo-step2-gguf-f16")

    result = _export(qtbot, dialog)
    out = exports / "Demo-step2-gguf-f16"
    assert result["out"] == str(out)
    assert sorted(os.listdir(out)) == ["Demo-step2-f16.gguf", "Modelfile"]
    modelfile = (out / "Modelfile").read_text()
    assert "FROM ./Demo-step2-f16.gguf" in modelfile
    system = window.model.config.data.system_prompt
    assert f'SYSTEM """{system}"""' in modelfile
    assert f'MESSAGE user """{EXAMPLE[0]}"""' in modelfile
    assert f'MESSAGE assistant """{EXAMPLE[1]}"""' in modelfile

    dialog.close()
    again = _dialog(qtbot, window)  # the first export is kept: the next one gets a new folder
    again.set_format("gguf", "f16")
    assert again.out_edit.text() == str(exports / "Demo-step2-gguf-f16-2")
    again.close()


def test_the_trl_size_shown_is_the_size_written(qtbot, window, tmp_path, monkeypatch):
    """Measured by writing the project into a temporary folder, off the GUI thread (a large
    dataset makes that slow); "measuring…" meanwhile."""
    import threading

    from grpo_desktop.engine.export import plan, trl_project
    from grpo_desktop.ui.export.dialog import MEASURING

    writers = []
    real_write = trl_project.write_trl_project

    def spy(*args, **kwargs):  # the real writer, noting which thread it runs in
        writers.append(threading.current_thread())
        return real_write(*args, **kwargs)

    monkeypatch.setattr(trl_project, "write_trl_project", spy)
    plan._measured.clear()
    dialog = _dialog(qtbot, window)
    dialog.set_format("trl")
    assert dialog.size_label.text() == MEASURING
    qtbot.waitUntil(lambda: dialog.size_label.text() != MEASURING, timeout=60_000)
    assert writers and threading.main_thread() not in writers
    shown = dialog.size_label.text()
    result = _export(qtbot, dialog)
    written = folder_bytes(result["out"])
    assert result["out"] == str(tmp_path / "work" / "Demo exports" / "Demo-trl")
    assert shown == f"about {size_text(written)}", (shown, written)
    assert dialog._plan().result_bytes == written
    dialog.close()
