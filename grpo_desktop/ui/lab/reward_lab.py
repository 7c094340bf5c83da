"""The reward-design Lab: design a reward, watch it score.

On its built-in groups (twelve attempts at 17 × 23, the first G form the group; a small real
model's first answers to 8 × 7, none with all the tags, to compare all-or-nothing and per-tag
format credit) or on a run's real rollouts ("Open in Lab" in the rollout inspector: `open_step`),
the user sets the accuracy and format weights, the format credit, the checker (strict or
lenient), G, advantage scaling and std type, length normalisation and the KL leash β; every
reward and advantage is recomputed at once by the engine's own code (engine/lab/rewards.py) and
shown against the group mean (with the format's share of it), with live verdicts for reward
hacking, length bias, no signal and a format that teaches nothing. On real rollouts the session's custom checker can be edited
and re-run (trusted code only, in the sandboxed checker process, cached per completion), and
"Use these settings" copies the reward and advantage settings into the session like a form edit.

What it does not do: run a model (β is explained, not measured) or change a run already made.
Try it: Learn ▸ GRPO Lab, the reward tab; tests/ui/lab/test_reward_lab.py.
"""

from __future__ import annotations

import contextlib
import html
import sys
import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.lab.rewards import LabSettings, RewardLab, with_changes
from grpo_desktop.engine.lab.verdicts import kl_note, verdicts
from grpo_desktop.ui.common.form import tooltip_for
from grpo_desktop.ui.common.widgets import SliderSpin, note_label, set_note, wrapped_label
from grpo_desktop.ui.lab.reward_checker import CheckerBox
from grpo_desktop.ui.lab.reward_detail import detail_html, note_style
from grpo_desktop.ui.lab.reward_table import PipelineStrip, RolloutScoreTable

TITLE = "Design the reward (17 × 23)"
NOTE_KIND = {
    "reward_hacking": "error",
    "length_bias": "warning",
    "no_signal": "warning",
    "format_flat": "warning",
}
BUILTIN_GROUPS = {  # engine.lab.attempts.BUILTIN_GROUPS name: (menu entry, what it shows)
    "multiply": (
        "17 × 23: attempts with and without tags",
        "<b>The model sampled attempts at 17 × 23</b> (right answer 391). Design the "
        "reward; then break it on purpose: format ≥ accuracy, length normalisation, G = 2.",
    ),
    "untagged": (
        "8 × 7: a small model's first answers",
        "<b>A small real model's first answers to 8 × 7</b> (56), none with all four tags in "
        "place. Format credit <i>all</i>: every format score and <i>From format</i> is 0. "
        "<i>per_tag</i>: answers with more tags are pushed up.",
    ),
}
COPIED = (
    ("rewards", "accuracy_weight"),
    ("rewards", "format_weight"),
    ("rewards", "format_credit"),
    ("rewards", "answer_checker"),
    ("algorithm", "scale_rewards"),
    ("algorithm", "std_type"),
)


class RewardLabView(QWidget):
    """See the module docstring. `model` is the SessionModel (None: the built-in group only)."""

    def __init__(self, model=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.lab = RewardLab.with_builtin_group()
        self.settings = LabSettings()
        self.step: int | None = None  # the run's step shown, None: the built-in group
        self.focus: int | None = None  # the one group shown (None: all groups of the step)
        self.result = None
        self.last_ms = 0.0  # the last recomputation (rewards, advantages, table), ms
        self._stale = True  # settings or rollouts changed while hidden: recompute when shown

        self.source_label = QLabel()
        self.source_label.setWordWrap(True)
        self.group_box = QComboBox()
        self.builtin_button = QPushButton("Back to the built-in group")
        self.builtin_box = QComboBox()  # which built-in group
        for name, (entry, _) in BUILTIN_GROUPS.items():
            self.builtin_box.addItem(entry, name)
        self.builtin_box.setToolTip("The Lab's built-in groups of answers to design a reward on")
        self.builtin_name = "multiply"
        self.strip = PipelineStrip()
        self.verdict_notes = [note_label("warning") for _ in range(4)]
        for note in self.verdict_notes:
            note.setMargin(5)  # note_style: a sheet's padding would cut the last line off
        self.baseline_label = QLabel()
        self.baseline_label.setWordWrap(True)
        self.table = RolloutScoreTable()
        self.detail = QTextBrowser()
        self.detail.setMinimumHeight(90)
        self.timing_label = wrapped_label(muted=True)

        self.accuracy = SliderSpin(0.0, 100.0, 2.0)
        self.format = SliderSpin(0.0, 100.0, 2.0)
        self.format_credit = QComboBox()
        self.format_credit.addItems(["all", "per_tag"])
        self.format_credit.setToolTip(tooltip_for("rewards", "format_credit"))
        self.checker_mode = QComboBox()
        self.checker_mode.addItems(["strict", "lenient"])
        self.checker_mode.setToolTip(
            "strict: a hedge ('381 or 391') scores 0. lenient: the last value counts, so "
            "hedging wins (the sloppy checker the lessons warn about)."
        )
        self.g_spin = QSpinBox()
        self.g_spin.setRange(2, len(self.lab.rollouts))
        self.g_spin.setToolTip("How many of the attempts form the group (the first G)")
        self.scale_box = QComboBox()
        self.scale_box.addItems(["group", "batch", "none"])
        self.std_box = QComboBox()
        self.std_box.addItems(["population", "sample"])
        self.length_norm = QCheckBox("Length normalisation (GRPO)")
        self.length_norm.setToolTip(
            "On: each rollout's loss is its tokens' mean (GRPO), so short rollouts get bigger "
            "per-token updates. Off: divided by one constant, the max length (Dr. GRPO)."
        )
        self.beta = SliderSpin(0.0, 10.0, 1.0)
        self.kl_label = wrapped_label(muted=True)
        self.checker_box = CheckerBox()
        self.use_button = QPushButton("Use these settings")
        self.use_button.setToolTip(
            "Copy the weights, format credit, checker mode, advantage scaling and std type (and your checker "
            "code, when edited here) into the session's Reward and Hyperparameters settings"
        )
        self.use_status = wrapped_label(muted=True)

        reward = QGroupBox("Reward")
        rform = QFormLayout(reward)
        rform.addRow("Accuracy weight", self.accuracy)
        rform.addRow("Format weight", self.format)
        rform.addRow("Format credit", self.format_credit)
        rform.addRow("Answer checker", self.checker_mode)
        adv = QGroupBox("Group and advantage")
        aform = QFormLayout(adv)
        aform.addRow("Group size G", self.g_spin)
        aform.addRow("Scaling", self.scale_box)
        aform.addRow("Std", self.std_box)
        aform.addRow(self.length_norm)
        kl = QGroupBox("KL leash β")
        kcol = QVBoxLayout(kl)
        kcol.addWidget(self.beta)
        kcol.addWidget(self.kl_label)
        controls = QWidget()
        ccol = QVBoxLayout(controls)
        ccol.setContentsMargins(0, 0, 4, 0)
        for w in (reward, adv, self.checker_box, kl):
            ccol.addWidget(w)
        ccol.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(controls)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        left = QWidget()
        left.setFixedWidth(350)
        lcol = QVBoxLayout(left)
        lcol.setContentsMargins(0, 0, 0, 0)
        lcol.addWidget(scroll, 1)
        lcol.addWidget(self.use_button)
        lcol.addWidget(self.use_status)

        source_row = QHBoxLayout()
        source_row.addWidget(self.source_label, 1)
        source_row.addWidget(self.builtin_box)
        source_row.addWidget(self.group_box)
        source_row.addWidget(self.builtin_button)
        right = QWidget()
        rcol = QVBoxLayout(right)
        rcol.setContentsMargins(4, 0, 0, 0)
        rcol.addLayout(source_row)
        rcol.addWidget(self.strip)
        for note in self.verdict_notes:
            rcol.addWidget(note)
        rcol.addWidget(self.baseline_label)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.detail)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([330, 200])
        rcol.addWidget(split, 1)
        rcol.addWidget(self.timing_label)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(left)
        layout.addWidget(right, 1)

        self.accuracy.value_edited.connect(lambda v: self._change(accuracy_weight=float(v)))
        self.format.value_edited.connect(lambda v: self._change(format_weight=float(v)))
        self.format_credit.currentTextChanged.connect(lambda t: self._change(format_credit=t))
        self.builtin_box.currentIndexChanged.connect(
            lambda _i: self.show_builtin(self.builtin_box.currentData())
        )
        self.checker_mode.currentTextChanged.connect(lambda t: self._change(answer_checker=t))
        self.g_spin.valueChanged.connect(lambda g: self._change(G=int(g)))
        self.scale_box.currentTextChanged.connect(lambda t: self._change(scale_rewards=t))
        self.std_box.currentTextChanged.connect(lambda t: self._change(std_type=t))
        self.length_norm.toggled.connect(lambda on: self._change(length_normalise=bool(on)))
        self.beta.value_edited.connect(lambda v: self._change(beta=float(v)))
        self.checker_box.edited.connect(self._on_checker_box_edited)
        self.group_box.currentIndexChanged.connect(self._on_group_box_changed)
        self.builtin_button.clicked.connect(lambda: self.show_builtin(self.builtin_name))
        self.use_button.clicked.connect(self.use_settings)
        self.table.currentCellChanged.connect(lambda *_a: self._show_detail())
        if model is not None:
            model.trust_changed.connect(self._on_model_trust_changed)
        self.show_builtin()

    # ------------------------------------------------------------------ what is shown

    def show_builtin(self, name: str = "multiply") -> None:
        """A built-in group (BUILTIN_GROUPS): the attempts at 17 × 23 (the default) or a small
        model's first answers without all the tags, with healthy settings."""
        self.lab.close()
        self.lab = RewardLab.with_builtin_group(name)
        self.builtin_name = name
        self.step, self.focus = None, None
        self.builtin_box.blockSignals(True)
        self.builtin_box.setCurrentIndex(self.builtin_box.findData(name))
        self.builtin_box.blockSignals(False)
        self.g_spin.blockSignals(True)
        self.g_spin.setRange(2, len(self.lab.rollouts))
        self.g_spin.blockSignals(False)
        self.source_label.setText(BUILTIN_GROUPS[name][1])
        # A healthy step: accuracy 1, format 0.2, G = 8, Dr. GRPO's constant
        # normaliser; turning length normalisation on shows the length bias.
        self._load_settings(LabSettings(length_normalise=False), builtin=True)

    def open_step(self, step: int, group: int | None = None) -> bool:
        """Bring a run's step (its rows from the session's history) into the Lab, showing one
        group or all; False when that step's rollouts are not available."""
        rows = self.model.history.rollouts.get(step) if self.model is not None else None
        if not rows:
            return False
        config, source = self._run_config()
        lab = RewardLab.from_rows(rows, run_checker_source=source, data=config.data)
        try:
            lab.group_size(LabSettings())
        except ValueError:  # not whole groups of equal size: no run writes that
            return False
        self.lab.close()
        self.lab = lab
        self.step = step
        groups = sorted({r.group for r in self.lab.rollouts})
        self.focus = group if group in groups else None
        self.group_box.blockSignals(True)
        self.group_box.clear()
        self.group_box.addItem(f"All {len(groups)} groups", None)
        for g in groups:
            self.group_box.addItem(f"Group {g}", g)  # numbered as in the inspector
        self.group_box.setCurrentIndex(self.group_box.findData(self.focus))
        self.group_box.blockSignals(False)
        self.source_label.setText(
            f"<b>Step {step} of the run</b>: {len(rows)} real rollouts, re-scored with the "
            "settings on the left (the run's to start with)."
        )
        self._load_settings(LabSettings.from_config(config), builtin=False)
        return True

    def _on_group_box_changed(self, _index: int) -> None:
        self.focus = self.group_box.currentData()
        self.recompute()

    def _run_config(self):
        """The config the shown run was trained with (the session's when unknown), and its
        checker source."""
        from grpo_desktop.engine.config import TrainConfig

        config = self.model.config
        run = self.model.history.run
        if run and isinstance(run.get("config"), dict):
            with contextlib.suppress(ValueError, KeyError, TypeError):  # an older run's config
                config = TrainConfig.from_dict(run["config"])
        return config, config.rewards.custom_checker

    def _load_settings(self, settings: LabSettings, builtin: bool) -> None:
        self.settings = settings
        widgets = (self.accuracy, self.format, self.format_credit, self.checker_mode, self.g_spin,
                   self.scale_box, self.std_box, self.length_norm, self.beta)  # fmt: skip
        for w in widgets:
            w.blockSignals(True)
        self.accuracy.set_value(settings.accuracy_weight)
        self.format.set_value(settings.format_weight)
        self.format_credit.setCurrentText(settings.format_credit)
        self.checker_mode.setCurrentText(settings.answer_checker)
        self.g_spin.setValue(min(settings.G, self.g_spin.maximum()))
        self.g_spin.setEnabled(builtin)
        self.scale_box.setCurrentText(settings.scale_rewards)
        self.std_box.setCurrentText(settings.std_type)
        self.length_norm.setChecked(settings.length_normalise)
        self.beta.set_value(settings.beta)
        for w in widgets:
            w.blockSignals(False)
        real = not builtin and self.model is not None
        self.group_box.setVisible(not builtin)
        self.builtin_box.setVisible(builtin)
        self.builtin_button.setVisible(not builtin)
        self.checker_box.setVisible(real)
        self.use_button.setVisible(self.model is not None)
        self.use_status.setText("")
        if real:
            self.checker_box.set_source(
                settings.custom_checker,
                settings.custom_weight,
                self._may_run(settings.custom_checker),
            )
            self.checker_box.set_status("")
        self.recompute()

    # ------------------------------------------------------------------ recomputing

    def _change(self, **changes) -> None:
        self.settings = with_changes(self.settings, **changes)
        self.recompute()

    def recompute(self) -> None:
        """Rescore everything under the current settings and redraw (timed: `last_ms`). While
        the Lab is hidden this waits for it to be shown (the first pass imports torch)."""
        if not self.isVisible():
            self._stale = True
            return
        self._stale = False
        first = "torch" not in sys.modules
        t0 = time.perf_counter()
        s = self.settings
        self.result = result = self.lab.compute(s)
        rows = result.rows if self.focus is None else result.group_rows(self.focus)
        stats = result.groups
        if self.focus is not None:
            stats = [g for g in result.groups if g.group == self.focus]
        shown_verdicts = verdicts(s, rows, stats) if self.focus is not None else result.verdicts
        G = self.lab.group_size(s)
        self.strip.show_result(rows[0].rollout.prompt, result, G, len(stats))
        for note, v in zip(self.verdict_notes, [*shown_verdicts, None, None, None]):
            if v is None:
                set_note(note, "")
                continue
            note.setStyleSheet(note_style(NOTE_KIND.get(v.kind, "info")))
            set_note(note, f"<b>{v.title}.</b> {html.escape(v.text, quote=False)}")
        self._show_baseline(stats)
        self.table.show_rows(rows, "custom" in rows[0].parts)
        self.kl_label.setText(kl_note(s.beta))
        self._show_detail()
        self.last_ms = (time.perf_counter() - t0) * 1000
        self.timing_label.setText(
            f"Recomputed {len(result.rows)} rewards and advantages in {self.last_ms:.1f} ms "
            "with the engine's own reward and advantage code"
            + (" (the first time includes loading torch)." if first else ".")
            + ("" if self.step is not None else " Lengths are estimated (word pieces).")
        )
        if result.custom_pending:
            self._run_checker()

    def _show_baseline(self, stats) -> None:
        if len(stats) == 1:
            g = stats[0]
            mean = "no score" if g.mean is None else f"{g.mean:.3f}"
            self.baseline_label.setText(
                f"<b>Baseline</b> (the group's mean reward): {mean} · std {g.std:.3f} "
                f"({self.settings.std_type}) — ↑ rollouts beat it and are made more likely, "
                "↓ fall short and are made less likely."
            )
            return
        flat = sum(not g.spread for g in stats)
        self.baseline_label.setText(
            f"<b>Baselines</b>: each of the {len(stats)} groups is measured against its own mean "
            f"reward; {flat} of them have no spread."
        )

    def _show_detail(self) -> None:
        if self.result is None:
            return
        rows = self.result.rows if self.focus is None else self.result.group_rows(self.focus)
        k = self.table.currentRow()
        if not rows or not 0 <= k < len(rows):
            self.detail.setHtml("<p style='color:#666'>Select a rollout to read it.</p>")
            return
        self.detail.setHtml(detail_html(rows[k], self.result))

    # ------------------------------------------------------------------ custom checker

    def _on_checker_box_edited(self) -> None:
        box = self.checker_box
        source = box.source() if box.compiles() else ""
        self._change(custom_checker=source, custom_weight=box.weight.value())

    def _may_run(self, source: str) -> bool:
        """Whether checker code may run here: the session's own when it may run (SessionModel's
        rule: typed in this window or trusted), else code trusted before by its hash."""
        m = self.model
        if not source.strip():
            return True
        if source == m.config.rewards.custom_checker:
            return m.checker_trusted()
        return m.trust_store.is_trusted(source)

    def _on_model_trust_changed(self, _trusted: bool) -> None:
        box = self.checker_box
        if self.step is not None and not box.trusted and self._may_run(box.source()):
            box.set_trusted(True)
            self.recompute()

    def _run_checker(self) -> None:
        r = self.model.config.rewards
        self.checker_box.run(
            self.lab, self.settings.custom_checker, r.checker_timeout_s, r.checker_memory_mb,
            self._on_checker_box_finished,
        )  # fmt: skip

    def _on_checker_box_finished(self, lab) -> None:
        if lab is self.lab:
            self.recompute()

    # ------------------------------------------------------------------ into the session

    def use_settings(self) -> None:
        """Copy the reward and advantage settings into the session (a normal edit: unsaved)."""
        if self.model is None:
            return
        self.checker_box.flush()
        s, m = self.settings, self.model
        values = {
            "accuracy_weight": float(s.accuracy_weight),
            "format_weight": float(s.format_weight),
            "format_credit": s.format_credit,
            "answer_checker": s.answer_checker,
            "scale_rewards": s.scale_rewards,
            "std_type": s.std_type,
        }
        for section, name in COPIED:
            m.set_value(section, name, values[name])
        extra = ""
        if self.step is not None and self.checker_box.trusted:
            source = self.checker_box.source()
            if source != m.config.rewards.custom_checker:
                m.write_checker(source)
                extra = ", your checker code"
            if source.strip():
                m.set_value("rewards", "custom_weight", float(self.checker_box.weight.value()))
        self.use_status.setText(
            f"Copied into the session: accuracy ×{s.accuracy_weight:g}, format "
            f"×{s.format_weight:g} ({s.format_credit}), {s.answer_checker} checker, {s.scale_rewards} scaling, "
            f"{s.std_type} std{extra}. The next run uses them; save the session to keep them."
        )

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self._stale:
            self.recompute()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.lab.close()
        super().closeEvent(event)
