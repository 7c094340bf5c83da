"""The Export dialog (File ▸ Export…, Ctrl+E), driven as a user drives it: the real QFileDialog
answered from a timer (tests/support/dialogs.py), Export, the progress bar, then Open folder and Copy
path for the export and for a checkpoint; Cancel; disabled while training runs.

The run is a real 2-step demo run (tests/support/export_runs.py, full fine-tuning: its merged export
is its own weights). Open folder is observed with QDesktopServices.setUrlHandler, Qt's own hook for
file URLs, so no file manager starts.
"""

from __future__ import annotations

import os
import shutil

import pytest
from PySide6.QtCore import QObject, QSettings, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QFileDialog

from grpo_desktop.session.document import new_session, save_session
from tests.support.dialogs import when_modal
from tests.support.export_runs import small_demo, train_run


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> str:
    """A real full fine-tuning demo run with checkpoints at steps 1 and 2."""
    cfg = small_demo(lora=False).replace(run={"max_steps": 2})
    return train_run(cfg, str(tmp_path_factory.mktemp("ui-export") / "run"))


@pytest.fixture
def session(demo_run, tmp_path) -> str:
    run = demo_run
    from grpo_desktop.engine.export.plan import read_config

    doc = new_session(str(tmp_path / "Demo.grpo"), read_config(run))
    shutil.copytree(run, doc.run_dir)
    doc.trained = True
    save_session(doc)
    return doc.path


@pytest.fixture
def window(show_window, session, tmp_path):
    from grpo_desktop.engine.export.plan import read_config
    from grpo_desktop.ui.main_window import MainWindow
    from tests.support.fakes import make_fake_train

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    cfg = read_config(os.path.join(session, "run"))
    w = show_window(
        MainWindow(cfg, make_fake_train(delay=0.3), settings=settings, probe_device=False)
    )
    assert w.session.open_session(session)
    return w


class Opened(QObject):
    """Receives the file URLs QDesktopServices.openUrl is asked to open."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    @Slot("QUrl")
    def open(self, url) -> None:
        self.urls.append(url.toLocalFile())


@pytest.fixture
def opened():
    catcher = Opened()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    yield catcher
    QDesktopServices.unsetUrlHandler("file")


def test_export_merged_from_the_dialog_then_open_and_copy(qtbot, window, tmp_path, opened):
    from grpo_desktop.ui.export.dialog import ExportDialog

    dialog = ExportDialog(window.model, window)
    qtbot.addWidget(dialog)
    dialog.show()
    rows = [dialog.checkpoints.list.item(i).text() for i in range(dialog.checkpoints.list.count())]
    assert rows[0].startswith("Step 2 (newest) · ") and rows[1].startswith("Step 1 · ")
    assert dialog.chosen()[1] == "merged"
    assert dialog.size_label.text() == "about 6.1 MB"  # 1,595,136 float32 weights + tokenizer
    assert dialog.out_edit.text().endswith("Demo-step2-merged")

    dialog.checkpoints.buttons.copy_button.click()  # the checkpoint's path
    checkpoint = os.path.join(window.model.run_dir, "checkpoints", "step-00000002")
    assert QGuiApplication.clipboard().text() == checkpoint
    dialog.checkpoints.buttons.open_button.click()
    assert opened.urls == [checkpoint]

    target = tmp_path / "exports"
    target.mkdir()
    (target / "other.txt").write_text("not empty: the export goes into a new folder inside")
    when_modal(QFileDialog, lambda d: (d.selectFile(str(target)), d.accept()))
    dialog.choose_button.click()
    out = str(target / "Demo-step2-merged")
    assert dialog.out_edit.text() == out

    dialog.export_button.click()
    assert not dialog.export_button.isEnabled() and dialog.cancel_button.isVisible()
    qtbot.waitUntil(lambda: not dialog.runner.busy, timeout=120_000)
    assert dialog.result is not None, dialog.status.text()
    assert dialog.result["out"] == out and os.path.isfile(os.path.join(out, "model.safetensors"))
    assert dialog.progress.value() == 1000
    assert dialog.status.text().startswith("Exported 6.1 MB in ")
    dialog.done_buttons.copy_button.click()
    assert QGuiApplication.clipboard().text() == out
    dialog.done_buttons.open_button.click()
    assert opened.urls[-1] == out
    dialog.close()


def test_cancel_leaves_nothing_and_says_so(qtbot, window, tmp_path):
    from grpo_desktop.ui.export.dialog import ExportDialog

    dialog = ExportDialog(window.model, window)
    qtbot.addWidget(dialog)
    dialog.show()
    out = tmp_path / "cancelled"
    dialog.out_edit.setText(str(out))
    dialog.export_button.click()
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: not dialog.runner.busy, timeout=60_000)
    assert dialog.result is None
    assert "cancelled" in dialog.status.text()
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".cancel")]
    assert dialog.export_button.isEnabled() and not dialog.cancel_button.isVisible()


def test_export_action_opens_the_dialog_and_is_disabled_while_training(
    qtbot, show_window, tmp_path
):
    """On a new session (nothing to ask before Start) with a made-up run that takes a while."""
    from grpo_desktop.ui.export.dialog import TRAINING, ExportDialog
    from grpo_desktop.ui.main_window import MainWindow
    from tests.support.fakes import make_fake_train

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    cfg = small_demo(lora=False).replace(run={"max_steps": 50})
    window = show_window(
        MainWindow(cfg, make_fake_train(delay=0.3), settings=settings, probe_device=False)
    )

    action = window.export_action
    assert action.shortcut().toString() == "Ctrl+E" and action.isEnabled()
    seen = []
    when_modal(ExportDialog, lambda d: (seen.append(d.windowTitle()), d.reject()))
    action.trigger()
    assert seen == ["Export"]

    assert window.start_run()
    qtbot.waitUntil(lambda: window.model.running, timeout=10_000)
    assert not action.isEnabled() and action.toolTip() == TRAINING
    window.model.stop()
    qtbot.waitUntil(lambda: not window.model.runner.active, timeout=30_000)
    assert action.isEnabled()
