"""The Export dialog refuses an output inside the session (issue 26 §2): the engine's check, shown
in the dialog's status line, with nothing written and the session's files untouched. The CLI's
cases (the run itself, symlinks, `..`, planted links) are tests/cli/test_cli_export_guards.py.
"""

from __future__ import annotations

import os
import shutil

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.session.document import new_session, save_session
from tests.support.dialogs import answer_box
from tests.support.export_runs import small_demo, train_run
from tests.support.hazards import tree


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> str:
    return train_run(small_demo(lora=True), str(tmp_path_factory.mktemp("ui-guard") / "run"))


def test_the_dialog_shows_why_an_output_inside_the_session_is_refused(
    qtbot, show_window, lora_run, tmp_path
):
    from grpo_desktop.engine.export.plan import read_config
    from grpo_desktop.ui.export.dialog import ExportDialog
    from grpo_desktop.ui.main_window import MainWindow
    from tests.support.fakes import make_fake_train

    doc = new_session(str(tmp_path / "Demo.grpo"), read_config(lora_run))
    shutil.copytree(lora_run, doc.run_dir)
    doc.trained = True
    save_session(doc)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = show_window(
        MainWindow(read_config(lora_run), make_fake_train(), settings=settings, probe_device=False)
    )
    assert window.session.open_session(doc.path)
    before = tree(doc.path)
    dialog = ExportDialog(window.model, window)
    qtbot.addWidget(dialog)
    dialog.show()
    for out, how in ((os.path.join(doc.path, "exports"), "lies inside the session"),
                     (doc.run_dir, "is the source run")):  # fmt: skip
        dialog.out_edit.setText(out)
        seen: list[str] = []
        if os.path.isdir(out):  # the run folder is not empty: the dialog asks first
            answer_box("Yes", seen)
        dialog.export_button.click()
        qtbot.waitUntil(lambda: not dialog.runner.busy, timeout=60_000)
        assert dialog.result is None
        assert how in dialog.status.text(), dialog.status.text()
        assert "Choose an output folder that is neither in" in dialog.status.text()
        assert tree(doc.path) == before
        assert seen == ([] if out.endswith("exports") else [seen[0]])
    dialog.close()
