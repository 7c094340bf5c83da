"""The Try tab driven as a user drives it, on the built-in demo model and a real trained run.

Sessions hold a copy of conftest's `trained_run` (the demo model trained for real with LoRA, a
checkpoint after each of its 2 steps). Each test types a prompt or picks a problem, presses
Generate (the button, or Ctrl+Return in the prompt box) and waits for the answers of both panes;
Stop and Esc cancel; training turns the tab off; a session without a run answers with the base
model alone; a model that cannot load is a message, not a traceback.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest
from PySide6.QtCore import QSettings, Qt

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.runs.files import read_run_config
from grpo_desktop.engine.variants.eval_target import held_out_examples
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.try_it import tips
from grpo_desktop.ui.try_it.problems import OWN_PROMPT
from grpo_desktop.ui.try_it.render import sample_tally, score_summary
from grpo_desktop.ui.try_it.view import TryView
from grpo_desktop.ui.try_it.worker import live_threads
from tests.support.fakes import make_fake_train
from tests.support.paths import FIXTURES
from tests.support.sessions import session_on_disk

WAIT_MS = 60_000


@pytest.fixture
def make_view(make_tab):
    """`make_view(doc, train_fn=None)`: a TryView (tests/ui/conftest.py's `make_tab`)."""
    return functools.partial(make_tab, TryView)


def _wait_answers(qtbot, view: TryView, sides=("base", "trained")) -> None:
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert not view.message_bar.message(), view.message_bar.message()
    for side in sides:
        assert view.panes[side].result is not None, side


def test_a_typed_prompt_is_answered_by_the_base_and_the_latest_checkpoint(
    qtbot, make_view, lora_session
):
    view = make_view(lora_session)
    # The right pane offers every checkpoint, the newest first and chosen.
    items = [view.checkpoint_box.itemText(i) for i in range(view.checkpoint_box.count())]
    assert items == ["Step 2 (latest)", "Step 1"]
    assert not view.note.isVisible()
    qtbot.keyClicks(view.prompt, "What is 3 + 4?")
    qtbot.mouseClick(view.generate_button, Qt.MouseButton.LeftButton)
    assert view.runner.busy and view.stop_button.isEnabled()
    assert not view.generate_button.isEnabled()
    _wait_answers(qtbot, view)
    base, trained = view.base_pane.result, view.trained_pane.result
    assert base["variant"] == "base" and trained["variant"] == "step-2"
    assert base["problem"] == "What is 3 + 4?" and base["gold"] is None
    for pane in (view.base_pane, view.trained_pane):
        shown = pane.plain_text()
        assert pane.result["samples"][0]["text"].split("<")[1] in shown  # the answer's text
        assert "reward" in shown and "accuracy not scored" in shown and "format" in shown
        assert "accuracy is not scored" in shown  # the note: a typed prompt has no gold
        assert pane.status.text().startswith("Answered in ")
    same = trained["samples"][0]["text"] == base["samples"][0]["text"]
    assert view.trained_pane.status.text().endswith("the same text as the base model") == same
    assert view.generate_button.isEnabled() and not view.stop_button.isEnabled()
    assert view.runner.loaded  # kept for the next Generate
    # An earlier checkpoint on the right: the held model switches its adapter.
    view.checkpoint_box.setCurrentIndex(1)
    assert view.generate()
    _wait_answers(qtbot, view)
    assert view.trained_pane.result["variant"] == "step-1"


def test_a_picked_problem_shows_its_gold_answer_and_is_scored_for_accuracy(
    qtbot, make_view, lora_session
):
    view = make_view(lora_session)
    picker = view.picker
    qtbot.waitUntil(lambda: picker.problem_box.count() > 1, timeout=WAIT_MS)
    assert picker.problem_box.itemText(0) == OWN_PROMPT
    # The held-out problems `grpo-desktop eval` scores, in its order.
    held = held_out_examples(read_run_config(lora_session.run_dir), 200, 0)
    problem = picker.problem_box.itemData(1)
    assert problem == {"problem": held[0].problem, "answer": held[0].answer}
    assert picker.problem_box.count() == 1 + len(held)
    picker.problem_box.setFocus()
    qtbot.keyClick(picker.problem_box, Qt.Key.Key_Down)  # the first problem
    assert view.prompt.toPlainText() == problem["problem"]
    assert f"Gold answer: <b>{problem['answer']}</b>" == picker.gold_label.text()
    view.prompt.setFocus()
    qtbot.keyClick(view.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert view.prompt.toPlainText() == problem["problem"]  # no newline typed: it generated
    _wait_answers(qtbot, view)
    for pane in view.panes.values():
        score = pane.result["samples"][0]["score"]
        assert pane.result["gold"] == problem["answer"]
        assert score["rewards"]["accuracy"] in (0.0, 1.0)
        mark = "✓" if score["rewards"]["accuracy"] == 1.0 else "✗"
        assert f"accuracy {mark}" in pane.plain_text()
    # Editing the text makes it a typed prompt: no gold answer any more.
    qtbot.keyClicks(view.prompt, " Explain.")
    assert picker.gold_label.text() == "" and picker.problem_box.currentIndex() == 0
    assert picker.problem is None
    # The training problems are listed too.
    picker.source_box.setCurrentIndex(1)
    qtbot.waitUntil(lambda: picker.problem_box.count() > 1, timeout=WAIT_MS)
    assert picker.problem_box.itemData(1)["problem"] != problem["problem"]


def test_sampled_answers_show_each_sample_scored(qtbot, make_view, lora_session):
    view = make_view(lora_session)
    assert not view.decode.temperature.isEnabled() and not view.decode.samples.isEnabled()
    view.decode.sampled_button.setChecked(True)
    assert view.decode.temperature.isEnabled() and view.decode.samples.isEnabled()
    view.decode.samples.setValue(3)
    view.decode.max_tokens.setValue(16)
    view.prompt.setPlainText("What is 5 + 6?")
    assert view.generate()
    _wait_answers(qtbot, view)
    for pane in view.panes.values():
        assert len(pane.result["samples"]) == 3
        assert all(s["tokens"] <= 16 for s in pane.result["samples"])
        shown = pane.plain_text()
        assert all(f"Sample {i} · reward" in shown for i in (1, 2, 3))
        # A typed prompt has no gold: accuracy does not score, so no total (issue 27 §1).
        assert "3 samples" in pane.status.text() and "mean reward" not in pane.status.text()


def test_stop_and_escape_cancel_the_answers(qtbot, make_view, lora_session):
    view = make_view(lora_session)
    view.decode.max_tokens.setValue(2000)
    view.prompt.setPlainText("What is 12 + 30?")
    with qtbot.waitSignal(view.runner.text_changed, timeout=WAIT_MS):
        assert view.generate()
    qtbot.mouseClick(view.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    base = view.base_pane.result  # stopped a token or a few after the first text arrived
    assert base["cancelled"] and base["samples"][0]["ended"] == "stopped"
    assert base["samples"][0]["score"] is None and "not scored" in view.base_pane.plain_text()
    assert view.base_pane.status.text().startswith("Stopped in ")
    assert view.trained_pane.result is None  # stopped before it began
    assert view.trained_pane.status.text() == "Stopped before it began."
    # Esc from the prompt box does the same.
    with qtbot.waitSignal(view.runner.text_changed, timeout=WAIT_MS):
        assert view.generate()
    view.prompt.setFocus()
    qtbot.keyClick(view.prompt, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert view.trained_pane.result is None
    assert view.generate_button.isEnabled()


def test_training_turns_try_off_and_frees_the_model(qtbot, make_view, lora_session):
    view = make_view(lora_session, train_fn=make_fake_train(delay=0.2))
    view.prompt.setPlainText("What is 2 + 2?")
    assert view.generate()
    _wait_answers(qtbot, view)
    assert view.runner.loaded
    assert view.model.start(resume=False) == []
    assert not view.runner.loaded  # the trainer needs the memory
    assert not view.generate_button.isEnabled() and view.note.text() == tips.TRAINING
    assert not view.generate() and view.message_bar.message() == tips.TRAINING
    view.model.stop()
    qtbot.waitUntil(lambda: not view.model.runner.active, timeout=WAIT_MS)
    assert view.generate_button.isEnabled()


def test_before_any_run_the_base_model_answers_alone(qtbot, make_view, tmp_path):
    view = make_view(session_on_disk(tmp_path))
    assert view.checkpoint_box.currentText() == "No checkpoint yet"
    assert not view.checkpoint_box.isEnabled()
    assert view.note.text() == tips.BASE_ONLY
    assert view.decode.max_tokens.value() == demo_config().algorithm.max_completion_length
    view.decode.max_tokens.setValue(12)
    assert not view.generate()  # nothing to ask yet
    assert "Type a prompt" in view.message_bar.message()
    view.prompt.setPlainText("What is 17 × 24?")
    assert view.generate()
    _wait_answers(qtbot, view, sides=("base",))
    assert view.base_pane.result["samples"][0]["tokens"] <= 12
    assert view.trained_pane.result is None
    assert view.trained_pane.status.text() == tips.NO_CHECKPOINT
    # Before a run the session's settings are tried; one that does not change the model (the
    # learning rate) keeps the loaded model, the picked problem and the decode settings.
    qtbot.waitUntil(lambda: view.picker.problem_box.count() > 1, timeout=WAIT_MS)
    view.pick_problem(2)
    held = view.runner.held
    view.model.set_value("algorithm", "learning_rate", 1e-3)
    assert view.picker.problem is not None and view.decode.max_tokens.value() == 12
    assert view.generate()
    _wait_answers(qtbot, view, sides=("base",))
    assert view.runner.held is held and view.base_pane.result["gold"] is not None
    # One that does (another model) is loaded afresh on the next Generate.
    view.model.set_value("model", "name_or_path", str(tmp_path / "elsewhere"))
    assert view.generate()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    assert "elsewhere" in view.message_bar.message() and not view.runner.loaded


def test_a_model_that_cannot_load_is_a_message_not_a_traceback(qtbot, make_view, tmp_path):
    config = demo_config().replace(model={"name_or_path": str(tmp_path / "no-such-model")})
    view = make_view(session_on_disk(tmp_path, config=config))
    view.prompt.setPlainText("What is 1 + 1?")
    assert view.generate()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=WAIT_MS)
    bar = view.message_bar
    assert bar.kind == "error" and "no-such-model" in bar.message()
    assert "Traceback" not in bar.message() and not bar.details_button.isVisibleTo(bar)
    assert view.base_pane.status.text() == "No answer (see the message above)."
    assert view.generate_button.isEnabled()


def test_the_window_has_a_try_tab_and_closing_stops_its_work(
    qtbot, show_window, lora_session, tmp_path
):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = show_window(
        MainWindow(demo_config(), session=lora_session.path, settings=settings, probe_device=False)
    )
    tabs = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    assert "Try" in tabs
    window.tabs.setCurrentWidget(window.try_view)
    view = window.try_view
    assert view.checkpoint_box.currentText() == "Step 2 (latest)"
    view.decode.max_tokens.setValue(2000)
    view.prompt.setPlainText("What is 8 + 9?")
    with qtbot.waitSignal(view.runner.text_changed, timeout=WAIT_MS):
        assert view.generate()
    window.close()
    assert not view.runner.busy and not view.runner.loaded and not live_threads()


def test_a_run_folder_shown_read_only_is_tried_and_a_trl_run_without_weights_is_base_only(
    qtbot, show_window, trained_run, tmp_path
):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = show_window(MainWindow(demo_config(), settings=settings, probe_device=False))
    run = str(tmp_path / "runs" / "mine")
    shutil.copytree(trained_run(lora=True), run)
    assert window.run_folder.open(run)  # File ▸ Open Run Folder…
    view = window.try_view
    window.tabs.setCurrentWidget(view)
    assert view.checkpoint_box.currentText() == "Step 2 (latest)"
    view.prompt.setPlainText("What is 6 + 7?")
    assert view.generate()
    _wait_answers(qtbot, view)
    assert view.trained_pane.result["variant"] == "step-2"
    trl = os.path.join(FIXTURES, "trl_run")
    assert window.run_folder.open(
        trl
    )  # no weights saved (tests/ui/try_it/test_trl_models.py: some)
    assert "saved no model yet" in view.note.text() and view.generate_button.isEnabled()
    assert view.checkpoint_box.currentData() is None  # the base model answers alone
    assert not view.runner.loaded  # another run shown: the model was freed


def test_an_answers_header_names_every_part_and_why_it_scored_so():
    score = {
        "rewards": {"accuracy": 0.0, "format": 1.0, "custom": None},
        "reward": 0.2,
        "extracted": None,
        "reasons": {"accuracy": "several answers: 17, 18"},
        "error": "check() raised ZeroDivisionError at line 2",
    }
    assert score_summary(score) == (
        "reward 0.2 · accuracy ✗ 0 · format 1 · custom checker not scored · accuracy: several "
        "answers: 17, 18 · checker error: check() raised ZeroDivisionError at line 2"
    )
    assert score_summary(None) == "not scored (stopped before the end)"
    right = {**score, "rewards": {"accuracy": 1.0}, "reward": 1.0}
    samples = [{"score": right}, {"score": score}, {"score": None}]
    assert sample_tally({"samples": samples}) == " · 1 of 2 right · mean reward 0.6"
