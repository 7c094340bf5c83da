"""The answer-level lab: GRPO on a model whose only choice is one of four whole answers to
17 × 24, every number of a step shown and explained.

Pick G, the checker (strict, or sloppy: it also pays the hedge "398 or 408"), the learning rate,
β and the seed; Step samples a group, scores it and updates the logits; Play steps four times a
second until Pause; Reset goes back to the starting model; "Use the lesson's group" loads the
worked example (408, 398, 398, 418; strict; lr 0.5) so the next Step shows its numbers:
advantages +1.732 / −0.577, probabilities after 31.6 / 39.6 / 23.7 / 5.1 %.

The math is engine/lab/answers.py (no Qt); the tables and plots answer_parts.py. Nothing here
touches the session or a real model. Try it: Learn ▸ GRPO Lab (Ctrl+L); tests/ui/lab/test_lab.py.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.lab.answers import (
    HEDGE,
    LESSON_GROUP,
    LESSON_LR,
    RIGHT,
    STARTS,
    AnswerLab,
    LabStep,
    signal_probability,
    success_probability,
)
from grpo_desktop.ui.common.widgets import note_label, set_note, wrapped_label
from grpo_desktop.ui.lab.answer_parts import (
    GroupTable,
    ProbabilityPlots,
    UpdateTable,
    mean_formula,
    percent,
    std_formula,
)
from grpo_desktop.ui.lab.answer_texts import (
    BETA_HELP,
    GROUP_HELP,
    KL_HELP,
    PLOT_HELP,
    UPDATE_HELP,
    group_text,
)

PLAY_INTERVAL_MS = 250  # four steps a second
PLAY_LIMIT = 400  # Play pauses by itself here; the plot stays readable
START_CHOICES = (
    ("lesson", "The lesson's model: 408 at 25 %"),
    ("weak", "A weaker model: 408 at 5 %, hedge 15 %"),
)
CHECKER_CHOICES = (
    ("strict", "Strict: only 408 scores 1"),
    ("sloppy", "Sloppy: the hedge scores 1 too"),
)


def _heading(text: str) -> QLabel:
    label = QLabel(text)
    font = label.font()
    font.setBold(True)
    font.setPointSizeF(font.pointSizeF() * 1.1)
    label.setFont(font)
    return label


class AnswerLabView(QWidget):
    """The lab's tab: controls on top, the group and the update on the left, plots on the right."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.lab = AnswerLab(seed=0)
        self.pending: tuple[int, ...] | None = None  # the lesson's group, before its Step
        self.last: LabStep | None = None
        self.timer = QTimer(self, interval=PLAY_INTERVAL_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self._build_controls()
        self.group_title = _heading("1. The group")
        self.group_line = wrapped_label()
        self.stats_line = QLabel()
        self.group_table = GroupTable()
        self.no_signal_note = note_label("warning")
        self.signal_line = wrapped_label(muted=True)
        self.update_title = _heading("2. The update")
        self.update_table = UpdateTable()
        self.update_help = wrapped_label(UPDATE_HELP, muted=True)
        self.plots = ProbabilityPlots()
        self.plot_help = wrapped_label(muted=True)

        left = QVBoxLayout()
        left.addWidget(self.group_title)
        left.addWidget(self.group_line)
        left.addWidget(self.stats_line)
        left.addWidget(self.group_table)
        left.addWidget(self.no_signal_note)
        left.addWidget(wrapped_label(GROUP_HELP, muted=True))
        left.addWidget(self.signal_line)
        left.addSpacing(10)
        left.addWidget(self.update_title)
        left.addWidget(self.update_table)
        left.addWidget(self.update_help)
        left.addStretch(1)
        right = QVBoxLayout()
        right.addWidget(_heading("3. Over the steps"))
        right.addWidget(self.plots, 1)
        right.addWidget(self.plot_help)
        body = QHBoxLayout()
        body.addLayout(left, 11)
        body.addSpacing(12)
        body.addLayout(right, 9)
        layout = QVBoxLayout(self)
        layout.addLayout(self.controls)
        layout.addLayout(body, 1)
        self.reset()

    # ------------------------------------------------------------------ controls

    def _build_controls(self) -> None:
        self.start_box = QComboBox()
        for key, text in START_CHOICES:
            self.start_box.addItem(text, key)
        self.start_box.setToolTip(
            "The model before training: how likely it is to write each of the four answers. "
            "Changing it starts over."
        )
        self.checker_box = QComboBox()
        for key, text in CHECKER_CHOICES:
            self.checker_box.addItem(text, key)
        self.checker_box.setToolTip(
            "Strict pays only the exact answer 408. Sloppy checks whether 408 appears in the "
            "answer, so it also pays the hedge “398 or 408” — a gap training will find."
        )
        self.g_spin = QSpinBox(minimum=2, maximum=16, value=4)
        self.g_spin.setToolTip("Group size G: how many answers are sampled and compared per step.")
        self.lr_spin = QDoubleSpinBox(minimum=0.05, maximum=5.0, singleStep=0.05, value=LESSON_LR)
        self.lr_spin.setDecimals(2)
        self.lr_spin.setToolTip("Learning rate: how far one step moves the logits.")
        self.beta_spin = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.05, value=0.0)
        self.beta_spin.setDecimals(2)
        self.beta_spin.setToolTip(
            "β, the KL leash: how hard each step pulls the model back toward where it started "
            "(the exact KL to the starting model). 0 = no pull."
        )
        self.seed_spin = QSpinBox(minimum=0, maximum=9999, value=0)
        self.seed_spin.setToolTip("Seed of the sampling: the same seed gives the same groups.")
        self.step_button = QPushButton("Step")
        self.step_button.setToolTip("Sample one group of G answers, score them, update the model.")
        self.play_button = QPushButton("Play")
        self.play_button.setCheckable(True)
        self.play_button.setToolTip("Step four times a second until you press Pause.")
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Back to the starting model, sampling from the seed again.")
        self.lesson_button = QPushButton("Use the lesson's group")
        self.lesson_button.setToolTip(
            "Start over with the lesson's worked example: the group 408, 398, 398, 418, the "
            "strict checker, learning rate 0.5, β 0. Press Step to apply it."
        )
        for box in (self.start_box, self.checker_box):
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        for spin in (self.g_spin, self.lr_spin, self.beta_spin, self.seed_spin):
            spin.setMinimumWidth(72)
        self.controls = QVBoxLayout()
        for pairs in (
            [("Start from", self.start_box), ("Checker", self.checker_box)],
            [
                ("Group size G", self.g_spin),
                ("Learning rate", self.lr_spin),
                ("β (KL leash)", self.beta_spin),
                ("Seed", self.seed_spin),
            ],
        ):
            row = QHBoxLayout()
            for i, (text, widget) in enumerate(pairs):
                label = QLabel(text)
                label.setToolTip(widget.toolTip())
                label.setBuddy(widget)
                if i:
                    row.addSpacing(16)
                row.addWidget(label)
                row.addWidget(widget)
            row.addStretch(1)
            self.controls.addLayout(row)
        buttons = QHBoxLayout()
        for b in (self.step_button, self.play_button, self.reset_button, self.lesson_button):
            buttons.addWidget(b)
        self.status = QLabel()
        self.status.setToolTip(
            "Where the model is now: steps taken, 408's and the hedge's share, KL."
        )
        buttons.addSpacing(12)
        buttons.addWidget(self.status, 1)
        self.controls.addLayout(buttons)

        self.start_box.currentIndexChanged.connect(lambda _i: self.reset())
        self.seed_spin.valueChanged.connect(lambda _v: self.reset())
        self.g_spin.valueChanged.connect(self._on_settings_changed)
        for w in (self.checker_box,):
            w.currentIndexChanged.connect(self._on_settings_changed)
        for w in (self.lr_spin, self.beta_spin):
            w.valueChanged.connect(self._on_settings_changed)
        self.step_button.clicked.connect(self.step)
        self.play_button.toggled.connect(self._on_play_button_toggled)
        self.reset_button.clicked.connect(self.reset)
        self.lesson_button.clicked.connect(self.use_lessons_group)

    @property
    def checker(self) -> str:
        return self.checker_box.currentData()

    @property
    def start(self) -> str:
        return self.start_box.currentData()

    # ------------------------------------------------------------------ actions

    def reset(self) -> None:
        """Back to the starting model; the RNG re-seeded; tables and plots cleared."""
        self.lab.start_probs = STARTS[self.start]
        self.lab.reset(self.seed_spin.value())
        self.pending = None
        self.last = None
        self._show(None)

    def step(self) -> LabStep:
        """One sample-score-update step (the lesson's group if it is loaded)."""
        group, self.pending = self.pending, None
        step = self.lab.step(
            self.g_spin.value(), self.checker, self.lr_spin.value(), self.beta_spin.value(), group
        )
        self.last = step
        self._show(step, lesson=group is not None)
        return step

    def use_lessons_group(self) -> None:
        """The lesson's worked example, loaded as the next step and previewed."""
        self.play_button.setChecked(False)
        for w, set_value in (
            (self.start_box, lambda: self.start_box.setCurrentIndex(0)),
            (self.checker_box, lambda: self.checker_box.setCurrentIndex(0)),
            (self.g_spin, lambda: self.g_spin.setValue(len(LESSON_GROUP))),
            (self.lr_spin, lambda: self.lr_spin.setValue(LESSON_LR)),
            (self.beta_spin, lambda: self.beta_spin.setValue(0.0)),
        ):
            w.blockSignals(True)
            set_value()
            w.blockSignals(False)
        self.reset()
        self.pending = LESSON_GROUP
        self._show_preview()

    def _show_preview(self) -> None:
        preview = self.lab.preview(
            self.pending, self.checker, self.lr_spin.value(), self.beta_spin.value()
        )
        self._show(preview, lesson=True, preview=True)

    def _on_settings_changed(self, *_args) -> None:
        if self.pending is not None:
            if self.g_spin.value() != len(self.pending):
                self.pending = None
                self._show(self.last)
            else:
                self._show_preview()
        else:
            self._update_texts(self.last)

    def _on_play_button_toggled(self, playing: bool) -> None:
        self.play_button.setText("Pause" if playing else "Play")
        if playing:
            self.timer.start()
        else:
            self.timer.stop()
        self._update_status()

    def _on_timer_timeout(self) -> None:
        if self.lab.steps >= PLAY_LIMIT:
            self.play_button.setChecked(False)
            self._update_status(f"Paused at {PLAY_LIMIT} steps: Reset to start again.")
            return
        self.step()

    def hideEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.play_button.setChecked(False)  # nothing animates out of sight
        super().hideEvent(event)

    # ------------------------------------------------------------------ drawing

    def _show(self, step: LabStep | None, *, lesson: bool = False, preview: bool = False) -> None:
        if step is None:
            self.group_title.setText("1. The group")
            self.group_line.setText(
                f"No group yet: press Step to sample G = {self.g_spin.value()} answers from the "
                "model, or “Use the lesson's group” for the lesson's worked example."
            )
            self.stats_line.setText("")
            self.group_table.show_step(None)
            self.update_title.setText("2. The update")
            self.update_table.show_start(self.lab.probs)
        else:
            number = "next step" if preview else f"step {self.lab.steps}"
            which = "the lesson's group" if lesson else "a sampled group"
            title = f"1. The group ({number}: {which})"
            if preview:
                title += " — press Step to apply it"
            self.group_title.setText(title)
            self.group_line.setText(group_text(step))
            self.stats_line.setText(f"{mean_formula(step)}     {std_formula(step)}")
            self.group_table.show_step(step)
            when = "if you press Step" if preview else f"in step {self.lab.steps}"
            self.update_title.setText(f"2. The update ({when})")
            self.update_table.show_step(step)
        if not preview:
            self.plots.show_history(self.lab.history_probs, self.lab.history_kl)
        self._update_texts(step)

    def _update_texts(self, step: LabStep | None) -> None:
        if step is not None and not step.has_signal:
            score = f"{step.rewards[0]:.0f}"
            set_note(
                self.no_signal_note,
                f"No signal: every answer in this group scored {score}, so each one equals the "
                "group's mean, every advantage is 0 and this step changes nothing. A group "
                "teaches only when it holds both a success and a failure.",
            )
        else:
            set_note(self.no_signal_note, "")
        G = self.g_spin.value()
        q = success_probability(self.lab.probs, self.checker)
        chance = signal_probability(q, G)
        self.signal_line.setText(
            f"Right now one answer scores 1 with chance p = {percent(q)}, so a group of {G} "
            f"carries signal (not all scores equal) {percent(chance)} of the time: "
            f"1 − p<sup>{G}</sup> − (1 − p)<sup>{G}</sup>.".replace(" %", "\u00a0%")
        )
        beta = self.beta_spin.value()
        self.update_help.setText(UPDATE_HELP + (BETA_HELP if beta > 0 else ""))
        key = "strict" if self.checker == "strict" else ("sloppy", self.start)
        self.plot_help.setText(f"{PLOT_HELP[key]} {KL_HELP}")
        self._update_status()

    def _update_status(self, text: str = "") -> None:
        if not text:
            p = self.lab.probs
            text = (
                f"Step {self.lab.steps}   ·   408 {percent(p[RIGHT])}   ·   hedge "
                f"{percent(p[HEDGE])}   ·   KL {self.lab.kl:.3f}"
            )
            if self.timer.isActive():
                text += "   ·   playing"
        self.status.setText(text)
