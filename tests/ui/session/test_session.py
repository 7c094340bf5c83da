"""Sessions in the window, driven by a fake train function: save, close and reopen with the same
settings, plots and rollouts (no retraining); the title's unsaved mark; Save As and Open Recent;
quitting with unsaved changes asks; autosave and crash recovery; the trust prompt for checker code
from elsewhere; damaged and future files; Start over on a session that already holds a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session import recovery
from grpo_desktop.session.document import load_session, new_session
from grpo_desktop.session.trust import TrustStore
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.run.worker import FINISHED, STOPPED
from grpo_desktop.ui.session.dialogs import RecoveryDialog, TrustDialog
from tests.support.dialogs import when_modal
from tests.support.fakes import make_fake_train

B, G, N = 2, 4, 5
CHECKER = "def check(completion, answer, prompt):\n    return 1.0\n"


def config(steps: int = N, **changes):
    return demo_config().replace(
        run={"max_steps": steps}, algorithm={"prompts_per_step": B, "num_generations": G}, **changes
    )


@pytest.fixture
def settings(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def make_window(show_window, settings):
    def make(train_fn=None, steps: int = N, **kwargs) -> MainWindow:
        w = MainWindow(
            config(steps), train_fn or make_fake_train(), settings=settings, probe_device=False,
            **kwargs,
        )  # fmt: skip
        w.session.ask_trust = _must_not_ask("trust")
        w.session.ask_restore_autosave = _must_not_ask("restore")
        return show_window(w)

    return make


def _must_not_ask(what: str):
    def ask(*_args):
        raise AssertionError(f"unexpected {what} question")

    return ask


def train(qtbot, w: MainWindow, final: str = FINISHED) -> None:
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == final, timeout=10_000)
    w.plots.redraw()


def plotted_steps(w: MainWindow) -> list[float]:
    w.plots.redraw()
    x, _ = w.plots.plots["reward"].series[0].item.getOriginalDataset()
    return [] if x is None else list(x)


def test_save_close_and_reopen_without_retraining(qtbot, make_window, tmp_path):
    w = make_window()
    assert w.windowTitle() == "Untitled[*] — GRPO Desktop" and not w.isWindowModified()
    train(qtbot, w)
    w.tabs.setCurrentWidget(w.inspector)
    w.model.set_value("algorithm", "learning_rate", 2e-3)
    assert w.isWindowModified()  # the title shows "Untitled*"
    path = str(tmp_path / "mine.grpo")
    assert w.session.save_as(path)
    assert w.windowTitle() == "mine[*] — GRPO Desktop" and not w.isWindowModified()
    saved_config = w.model.config
    rows = w.inspector.table_model.rowCount()
    w.tabs.setCurrentWidget(w.plots)  # after saving: not in the session
    w.close()
    assert not os.listdir(os.path.join(recovery.data_dir(), "open"))  # a clean close: no marker

    again = make_window(train_fn=_must_not_ask("training"))
    assert path in again.session.recent_paths()
    again.session.rebuild_recent_menu()
    listed = [a.data() for a in again.session.recent_menu.actions() if a.data()]
    assert listed[0] == path  # Open Recent lists it first
    assert again.session.open_session(path)
    assert again.model.config == saved_config and again.model.config.algorithm.learning_rate == 2e-3
    assert plotted_steps(again) == [1, 2, 3, 4, 5]
    assert again.inspector.visible_rows() == B * G  # the latest step at once, the rest after
    qtbot.waitUntil(lambda: not again.inspector.filling, timeout=5000)
    assert again.inspector.table_model.rowCount() == rows == B * G * N
    assert again.tabs.currentWidget() is again.inspector  # the session's layout came back
    assert again.windowTitle() == "mine[*] — GRPO Desktop" and not again.isWindowModified()
    assert "step 5 / 5" in again.controls.progress_label.text()
    assert again.controls.start_action.text() == "Start"  # completed: nothing to continue
    assert again.resume_banner.isHidden()


def test_save_writes_the_session_and_save_on_untitled_asks_for_a_name(qtbot, make_window, tmp_path):
    w = make_window()
    asked = []
    w.session.choose_save_path = lambda: asked.append(1) or str(tmp_path / "named")
    w.model.set_value("run", "seed", 42)
    assert w.session.save()  # untitled: Save acts as Save As
    assert asked and w.model.doc.path == str(tmp_path / "named.grpo")
    untitled_dir = os.path.join(recovery.data_dir(), "untitled")
    assert not os.listdir(untitled_dir)  # the untitled copy went away
    w.model.set_value("run", "seed", 43)
    assert w.isWindowModified()
    assert w.session.save() and len(asked) == 1  # a named session saves in place
    assert load_session(w.model.doc.path).config.run.seed == 43 and not w.isWindowModified()


def test_quitting_with_unsaved_changes_asks_and_cancel_keeps_the_window(qtbot, make_window):
    w = make_window()
    w.model.set_value("run", "seed", 5)
    asked = []
    w.session.ask_save_changes = lambda name: asked.append(name) or "cancel"
    w.close()
    assert asked == ["Untitled"] and w.isVisible()
    w.session.ask_save_changes = lambda name: "discard"
    with qtbot.waitSignal(w.closed, timeout=5000):
        w.close()
    assert not os.listdir(os.path.join(recovery.data_dir(), "untitled"))


def test_autosaved_edits_are_restored_after_a_crash(qtbot, make_window, tmp_path):
    w = make_window()
    path = str(tmp_path / "crashy.grpo")
    assert w.session.save_as(path)
    w.session.autosave_timer.setInterval(50)
    w.model.set_value("algorithm", "learning_rate", 7e-4)
    auto = os.path.join(path, recovery.AUTOSAVE_FILE)
    qtbot.waitUntil(lambda: os.path.isfile(auto), timeout=5000)
    assert load_session(path).config.algorithm.learning_rate != 7e-4  # saved file untouched
    _pretend_the_window_crashed(path)

    fresh = make_window()
    offered = []
    fresh.session.ask_reopen = lambda paths: offered.append(paths) or paths[0]
    assert fresh.session.offer_crash_recovery()
    assert offered == [[path]]
    assert fresh.model.doc.path == path
    assert fresh.model.config.algorithm.learning_rate == 7e-4 and fresh.isWindowModified()
    assert "Restored the unsaved changes" in fresh.message_bar.message()
    assert recovery.crashed_sessions() == []  # answered: not offered again


def test_the_recovery_dialog_lists_crashed_sessions_newest_first(qtbot, make_window, tmp_path):
    w = make_window()
    paths = [new_session(str(tmp_path / f"{n}.grpo"), config()).path for n in ("a", "b")]
    for path in paths:
        recovery.mark_open(path)
        _pretend_the_window_crashed(path)
    listed = []

    def answer(dialog: RecoveryDialog) -> None:
        listed.extend(dialog.list.item(i).text() for i in range(dialog.list.count()))
        dialog.list.setCurrentRow(1)
        dialog.accept()

    when_modal(RecoveryDialog, answer)
    assert w.session.offer_crash_recovery()
    assert [t.split()[0] for t in listed] == ["b", "a"] and w.model.doc.path == paths[0]


def test_opening_a_session_with_a_newer_autosave_asks_to_restore(qtbot, make_window, tmp_path):
    doc = new_session(str(tmp_path / "s.grpo"), config())
    draft = load_session(doc.path)
    draft.config = draft.config.replace(run={"seed": 99})
    recovery.write_autosave(draft)
    os.utime(os.path.join(doc.path, "session.json"), (1, 1))  # the saved version is older
    w = make_window()
    answers = iter([False, True])
    asked = []
    w.session.ask_restore_autosave = lambda name, when: asked.append(when) or next(answers)
    assert w.session.open_session(doc.path)
    assert w.model.config.run.seed == 0 and not w.isWindowModified()
    assert recovery.newer_autosave(doc.path) is None  # "no" deleted the autosave
    recovery.write_autosave(draft)
    os.utime(os.path.join(doc.path, "session.json"), (1, 1))
    w.session.close_session()
    assert w.session.open_session(doc.path)
    assert len(asked) == 2 and w.model.config.run.seed == 99 and w.isWindowModified()


def _pretend_the_window_crashed(path: str) -> None:
    """Rewrite the window's crash marker with the id of a process that has ended."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    marker = recovery._marker(path)
    with open(marker) as fh:
        record = json.load(fh)
    record["pid"] = int(child.stdout)
    with open(marker, "w") as fh:
        json.dump(record, fh)


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "damaged"),
        ('{"schema_version": 99}', "newer GRPO Desktop"),
        ('{"schema_version": 2, "trained": true, "config": {}}', "run folder is missing"),
    ],
)
def test_damaged_or_future_sessions_show_the_message_and_the_app_stays_usable(
    qtbot, make_window, tmp_path, content, words
):
    bundle = tmp_path / "bad.grpo"
    bundle.mkdir()
    (bundle / "session.json").write_text(content)
    w = make_window()
    before = w.model.doc.path
    assert not w.session.open_session(str(bundle))
    assert w.message_bar.kind == "error" and words in w.message_bar.message()
    assert "Traceback" not in w.message_bar.message()
    assert (bundle / "session.json").read_text() == content  # nothing overwritten
    assert w.model.doc.path == before
    train(qtbot, w)  # still usable
    assert w.model.history.num_steps == N


def _answer_trust_dialog(qtbot, trust: bool, seen: list) -> None:
    """Answer the real trust dialog once it is up, recording the code it shows."""

    def answer(dialog: TrustDialog) -> None:
        seen.append(dialog.code.toPlainText())
        assert dialog.code.isReadOnly()
        (dialog.trust_button if trust else dialog.keep_button).click()

    when_modal(TrustDialog, answer)


def test_an_untrusted_checker_is_shown_and_asked_about_and_the_answer_remembered(
    qtbot, make_window, tmp_path
):
    path = new_session(str(tmp_path / "friend.grpo"), config(rewards={"custom_checker": CHECKER}))
    w = make_window()
    del w.session.ask_trust  # the real dialog
    seen: list[str] = []
    _answer_trust_dialog(qtbot, trust=False, seen=seen)
    assert w.session.open_session(path.path)
    assert seen == [CHECKER]
    panel = w.reward_panel
    assert not panel.trust_box.isHidden() and panel.editor.isReadOnly()
    assert not panel.test_button.isEnabled()
    assert not w.start_run()
    assert "has not been trusted" in w.message_bar.message() and w.model.state == "idle"
    assert not TrustStore().is_trusted(CHECKER)

    w.session.close_session()
    _answer_trust_dialog(qtbot, trust=True, seen=seen)
    assert w.session.open_session(path.path)
    assert seen == [CHECKER, CHECKER] and TrustStore().is_trusted(CHECKER)
    assert panel.trust_box.isHidden() and not panel.editor.isReadOnly()

    other = make_window()  # ask_trust fails the test if called: the hash is remembered
    assert other.session.open_session(path.path) and other.model.checker_trusted()
    train(qtbot, other)


def test_pressing_trust_in_the_reward_panel_enables_a_kept_disabled_checker(
    qtbot, make_window, tmp_path
):
    path = new_session(str(tmp_path / "f.grpo"), config(rewards={"custom_checker": CHECKER}))
    w = make_window()
    w.session.ask_trust = lambda source, origin: False
    assert w.session.open_session(path.path)
    assert not w.start_run()
    w.reward_panel.trust_button.click()
    assert w.model.checker_trusted() and w.reward_panel.trust_box.isHidden()
    train(qtbot, w)


def test_checker_code_typed_here_runs_and_reopens_without_asking(qtbot, make_window, tmp_path):
    w = make_window()
    w.reward_panel.editor.setPlainText(CHECKER)  # as if typed
    w.reward_panel._compile_timer.timeout.emit()
    assert w.model.checker_trusted()
    path = str(tmp_path / "mine.grpo")
    assert w.session.save_as(path)
    other = make_window()  # ask_trust would fail the test
    assert other.session.open_session(path) and other.model.checker_trusted()


def test_settings_imported_from_a_file_ask_about_their_checker(qtbot, make_window, tmp_path):
    file = tmp_path / "cfg.json"
    file.write_text(config(rewards={"custom_checker": CHECKER}).to_json())
    w = make_window()
    asked = []
    w.session.ask_trust = lambda source, origin: asked.append((source, origin)) or False
    assert w.open_config(str(file))
    assert asked == [(CHECKER, str(file))] and not w.model.checker_trusted()


def test_start_on_a_session_with_a_finished_run_asks_before_replacing_it(qtbot, make_window):
    w = make_window()
    train(qtbot, w)
    first = w.model.doc.path
    w.session.ask_start_over = lambda steps: "cancel"
    assert not w.start_run() and w.model.history.num_steps == N
    w.session.ask_start_over = lambda steps: "new"
    assert w.start_run()
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=10_000)
    assert w.model.doc.path != first and os.path.isfile(os.path.join(first, "run/events.jsonl"))
    w.session.ask_start_over = lambda steps: "replace"
    assert w.start_over()
    qtbot.waitUntil(lambda: w.model.state == FINISHED, timeout=10_000)
    with open(w.model.doc.events_path) as fh:
        events = [json.loads(line) for line in fh]
    steps = [e["step"] for e in events if e["type"] == "step"]
    assert steps == list(range(1, N + 1))  # the old run was replaced, not appended to


def test_a_stopped_run_offers_continue(qtbot, make_window, tmp_path):
    w = make_window(make_fake_train(delay=0.05), steps=1000)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.history.num_steps >= 2, timeout=10_000)
    w.controls.stop_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == STOPPED, timeout=10_000)
    # The fake trainer saves no checkpoints: Continue starts again from step 0.
    assert w.controls.start_action.text() == "Continue"
    assert not w.resume_banner.isHidden()
    assert "before its first checkpoint" in w.resume_banner.text.text()
