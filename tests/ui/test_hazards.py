"""The window meets the hazards of files handed to a user, with the real dialogs answered from a
QTimer: a session whose model ships code asks before anything runs it (the Dataset preview and
Continue included) and "Keep off" means it never runs; a session whose run folder points out of
it is refused; a damaged newest checkpoint is named in the banner and Continue picks up from the
one before. (The full disk in the window: tests/scenarios/test_disk_full.py.)"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from grpo_desktop.engine.events import read_events
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FINISHED, IDLE
from grpo_desktop.ui.session.model import UNTRUSTED_MODEL_CODE
from grpo_desktop.ui.session.remote_code_dialog import RemoteCodeDialog
from tests.support.dialogs import when_modal
from tests.support.hazards import (
    plant_model_code,
    small_config,
    train_in_process,
    tree,
    write_session,
)


@pytest.fixture
def window(show_window, tmp_path, micro_model_dir):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(small_config(micro_model_dir), settings=settings, probe_device=False)
    return show_window(w)


@pytest.fixture
def marker(tmp_path) -> str:
    return str(tmp_path / "the-model-code-ran")


def answer_model_code(trust: bool, seen: list, tries: int = 400) -> None:
    """Answer the next "Run this model's code?" dialog (Trust and run / Keep off) once it is up,
    noting the files it listed in `seen`."""

    def answer(dialog: RemoteCodeDialog) -> None:
        seen.append([dialog.files.item(i).text() for i in range(dialog.files.count())])
        (dialog.trust_button if trust else dialog.keep_button).click()

    when_modal(RemoteCodeDialog, answer, every_ms=25, tries=tries)


def _shipped_session(tmp_path, micro_model_dir, marker) -> str:
    import shutil

    model = shutil.copytree(micro_model_dir, tmp_path / "shipped-model")
    plant_model_code(str(model), marker)
    return write_session(str(tmp_path / "s.grpo"), small_config(str(model)), trust_code=True)


@pytest.mark.parametrize("trust", [False, True], ids=["keep off", "trust and run"])
def test_the_dataset_preview_runs_model_code_only_once_trusted(
    qtbot, window, tmp_path, micro_model_dir, marker, trust
):
    session = _shipped_session(tmp_path, micro_model_dir, marker)
    seen: list = []
    answer_model_code(trust, seen)
    assert window.session.open_session(session)  # asks while opening
    assert seen and any(f.endswith("tokenization_shipped.py") for f in seen[0]), seen
    panel = window.dataset_panel
    window.docks["dataset"].raise_()  # the preview runs once its tab is shown
    qtbot.waitUntil(lambda: panel.table.rowCount() > 0, timeout=30_000)
    if trust:
        qtbot.waitUntil(lambda: os.path.exists(marker), timeout=30_000)  # the test can fail
        qtbot.waitUntil(lambda: panel.table.item(0, 0).text().endswith("<|assistant|>"))
        return
    qtbot.waitUntil(lambda: "has not been trusted" in panel.status_note.text(), timeout=30_000)
    assert "plain prompt template" in panel.status_note.text()
    assert UNTRUSTED_MODEL_CODE in window.message_bar.message()
    assert not os.path.exists(marker)


def test_continue_asks_about_a_checkpoints_code_and_keep_off_never_runs_it(
    qtbot, window, tmp_path, micro_model_dir, marker
):
    session = write_session(
        str(tmp_path / "s.grpo"), small_config(micro_model_dir, steps=3), trust_code=True
    )
    train_in_process(small_config(micro_model_dir, steps=2), os.path.join(session, "run"))
    plant_model_code(os.path.join(session, "run", "checkpoints", "step-00000002", "model"), marker)
    seen: list = []
    answer_model_code(False, seen, tries=20)
    assert window.session.open_session(session)
    QApplication.processEvents()
    assert seen == []  # the base model ships no code: nothing to ask on opening
    assert window.resume_banner.isVisible()
    answer_model_code(False, seen)
    window.resume_banner.continue_button.click()
    assert seen and any("step-00000002" in f and "modeling_shipped.py" in f for f in seen[0])
    assert window.model.state == IDLE and not window.model.running
    assert UNTRUSTED_MODEL_CODE in window.message_bar.message()
    assert not os.path.exists(marker)
    answer_model_code(True, seen)  # asked again; now trusted: the run continues and loads it
    window.resume_banner.continue_button.click()
    qtbot.waitUntil(lambda: window.model.state == FINISHED, timeout=120_000)
    assert os.path.exists(marker)
    started = [e for e in read_events(window.model.doc.events_path) if e.type == "run_started"]
    assert started[-1].start_step == 2


def test_a_session_whose_run_points_out_of_it_is_refused(window, tmp_path, micro_model_dir):
    victim = tmp_path / "victim"
    (victim / "checkpoints").mkdir(parents=True)
    (victim / "checkpoints" / "precious.txt").write_text("not the app's")
    session = write_session(
        str(tmp_path / "s.grpo"), small_config(micro_model_dir), run="../victim"
    )
    before, current = tree(str(victim)), window.model.doc.path
    assert not window.session.open_session(session)
    assert "is not inside the session folder" in window.message_bar.message()
    assert window.model.doc.path == current and tree(str(victim)) == before


def test_continue_skips_a_damaged_newest_checkpoint(qtbot, window, tmp_path, micro_model_dir):
    session = write_session(str(tmp_path / "s.grpo"), small_config(micro_model_dir, steps=4))
    run = os.path.join(session, "run")
    train_in_process(small_config(micro_model_dir, steps=3), run)
    optimizer = os.path.join(run, "checkpoints", "step-00000003", "optimizer.pt")
    with open(optimizer, "r+b") as fh:
        fh.truncate(100)
    assert window.session.open_session(session)
    text = window.resume_banner.text.text()
    assert "step 3 (optimizer.pt: it is cut short" in text, text
    assert "picks up from the checkpoint at step 2" in text, text
    window.resume_banner.continue_button.click()
    qtbot.waitUntil(lambda: window.model.state == FINISHED, timeout=120_000)
    log = window.log_view.toPlainText()
    assert "Skipped the newer checkpoint" in log and "optimizer.pt" in log, log
    events = read_events(window.model.doc.events_path)
    assert [e.step for e in events if e.type == "step"] == [1, 2, 3, 4]
    assert [e.start_step for e in events if e.type == "run_started"] == [0, 2]
