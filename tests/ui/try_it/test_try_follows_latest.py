"""Try's "Trained:" picker follows the newest checkpoint while a run saves them (found training
the real SmolLM2 in the window, issue 25 §4: after a 2-step run Try still offered "Step 1", the
checkpoint that was newest when the tab first listed them), and keeps a step the user chose.

A session holding a copy of conftest's LoRA-trained demo run (checkpoints at steps 1 and 2);
step 2's folder is held back, then put in place and announced as the trainer does
(SessionModel.checkpoint_saved)."""

from __future__ import annotations

import functools
import os
import shutil

import pytest

from grpo_desktop.engine.events import CheckpointSaved
from grpo_desktop.ui.try_it.view import TryView


@pytest.fixture
def make_view(make_tab):
    return functools.partial(make_tab, TryView)


def _items(box) -> list[str]:
    return [box.itemText(i) for i in range(box.count())]


def test_the_trained_picker_follows_the_newest_checkpoint(make_view, lora_session, tmp_path):
    step2 = os.path.join(lora_session.run_dir, "checkpoints", "step-00000002")
    held = str(tmp_path / "held")
    shutil.move(step2, held)
    view = make_view(lora_session)
    box = view.checkpoint_box
    assert _items(box) == ["Step 1 (latest)"] and box.currentData() == "step-1"

    shutil.move(held, step2)  # the trainer saves step 2
    view.model.checkpoint_saved.emit(CheckpointSaved(2, "checkpoints/step-00000002"))
    assert _items(box) == ["Step 2 (latest)", "Step 1"]
    assert box.currentData() == "step-2"

    box.setCurrentIndex(box.findData("step-1"))  # the user picks an older one: it stays
    view.model.checkpoint_saved.emit(CheckpointSaved(2, "checkpoints/step-00000002"))
    assert box.currentData() == "step-1"
