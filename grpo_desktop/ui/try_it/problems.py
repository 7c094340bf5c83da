"""The Try tab's problem picker: the run's held-out or training problems, with the gold answer.

`list_for(cfg)` lists the problems of the chosen source for those settings in the app's thread
pool (engine/variants/try_model.py `problem_choices`: loading a dataset can take a while and
imports the engine), newest request winning; a list that cannot be made is reported through
`failed`. Choosing a problem emits `picked(problem dict)`; `unpick()` (the prompt was edited)
goes back to "your own prompt" without a gold answer. The view puts `gold_label` where it likes.
Try it: tests/ui/try_it/test_try.py.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import rich_tooltip
from grpo_desktop.ui.try_it import tips

OWN_PROMPT = "Type your own prompt"
LISTING = "Listing the problems…"
SOURCES = (("held_out", "Held-out problems"), ("training", "Training problems"))
SHOWN_CHARS = 70  # of a problem in the picker


class ProblemPicker(QWidget):
    picked = Signal(object)  # {"problem", "answer"}, or None for your own prompt
    failed = Signal(str)  # why the problems cannot be listed

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.tasks = BackgroundTasks(self)
        self.problem: dict | None = None
        self._listed_for: tuple | None = None  # (source, settings) the list was made for
        self._cfg = None
        self.source_box = QComboBox()
        for key, label in SOURCES:
            self.source_box.addItem(label, key)
        self.source_box.setToolTip(rich_tooltip(tips.SOURCE))
        self.problem_box = QComboBox()
        self.problem_box.setMinimumContentsLength(20)
        self.problem_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.problem_box.setToolTip(rich_tooltip(tips.PROBLEM))
        self.gold_label = QLabel()
        self.gold_label.setToolTip(rich_tooltip(tips.GOLD))
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        caption = QLabel("Problem:")
        caption.setBuddy(self.problem_box)
        row.addWidget(caption)
        row.addWidget(self.source_box)
        row.addWidget(self.problem_box, 1)
        self.source_box.currentIndexChanged.connect(self._on_source_box_current_index_changed)
        self.problem_box.activated.connect(self._on_problem_box_activated)

    def list_for(self, cfg) -> None:
        """List the chosen source's problems for `cfg` (a TrainConfig), unless listed already."""
        self._cfg = cfg
        source = self.source_box.currentData()
        wanted = (source, repr(cfg.data), cfg.run.seed)  # what the problems depend on
        if wanted == self._listed_for:
            return
        self._listed_for = wanted
        self.unpick()
        self.problem_box.clear()
        self.problem_box.addItem(LISTING, None)
        self.problem_box.setEnabled(False)

        def job(cfg=cfg, source=source):
            from grpo_desktop.engine.variants.try_model import problem_choices

            return problem_choices(cfg, source)

        self.tasks.submit("problems", job, self._on_problems_listed)

    def forget(self) -> None:
        """The next list_for lists again (another session)."""
        self._listed_for = None

    def stop(self) -> None:
        self.tasks.cancel("problems")

    def pick(self, index: int) -> None:
        """Choose the problem at `index` (0: your own prompt)."""
        self.problem_box.setCurrentIndex(index)
        self._on_problem_box_activated(index)

    def unpick(self) -> None:
        """Back to your own prompt: no gold answer."""
        if self.problem is not None:
            self.problem = None
            self.gold_label.clear()
            if self.problem_box.isEnabled():
                self.problem_box.setCurrentIndex(0)

    def _on_problems_listed(self, problems, error) -> None:
        box = self.problem_box
        box.clear()
        box.addItem(OWN_PROMPT, None)
        box.setEnabled(True)
        if error is not None:
            self._listed_for = None  # try again next time
            self.failed.emit(f"Cannot list the problems: {error}")
            return
        for p in problems:
            text = " ".join(p["problem"].split())
            shown = text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
            box.addItem(f"{shown}  → {p['answer']}", p)
            box.setItemData(box.count() - 1, p["problem"], Qt.ItemDataRole.ToolTipRole)

    def _on_problem_box_activated(self, index: int) -> None:
        problem = self.problem_box.itemData(index)
        self.problem = problem
        if problem is None:
            self.gold_label.clear()
        else:
            self.gold_label.setText(f"Gold answer: <b>{html.escape(problem['answer'])}</b>")
        self.picked.emit(problem)

    def _on_source_box_current_index_changed(self, _index: int) -> None:
        if self._cfg is not None:
            self.list_for(self._cfg)
