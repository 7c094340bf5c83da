"""The Hyperparameters panel: the GRPO algorithm and run settings, generated from the config
metadata.

Every field of the `algorithm`, `run` and `alerts` (health alarms) sections gets an editor whose
tooltip is its help text; presets (GRPO, Dr. GRPO, DAPO, GSPO) set the algorithm fields at once;
"Starter: small real model" sets what a small pretrained model needs beyond the defaults (learning
rate, rewards, a worked example, lengths: engine/config/starters.py) in one step;
a note under them lists what the preset changed (old → new) with Undo (panels/preset_changes.py);
"Show advanced settings" reveals the fields marked advanced; validation messages appear under the
field they concern, and cross-field problems and risky settings at the top.
Try it: tests/ui/panels/test_panels.py.
"""

from __future__ import annotations

import copy
import dataclasses

from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.config import PRESET_LABELS, SECTIONS, STARTER_LABEL, starter_summary
from grpo_desktop.ui.common.form import CROSS_FIELD, ConfigForm, plain_message
from grpo_desktop.ui.common.widgets import note_label, rich_tooltip, set_note, wrapped_label
from grpo_desktop.ui.panels.preset_changes import ChangeNote

HYPER_SECTIONS = ("algorithm", "run", "alerts")
PRESET_HELP = {
    "grpo": "DeepSeekMath's GRPO: per-answer token mean, group std scaling, KL penalty 0.04.",
    "dr_grpo": "Dr. GRPO: no length normalisation and no std scaling (removes the length bias); "
    "no KL.",
    "dapo": "DAPO: token-level loss over the whole batch, clip-higher (ε high 0.28), dynamic "
    "sampling of groups with spread, no KL.",
    "gspo": "GSPO: one importance ratio per answer (sequence level) with a tight clip range; "
    "no KL.",
}


class HyperPanel(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.preset_buttons: dict[str, QPushButton] = {}
        # Two buttons a row under the label: in one row they would need a wider dock than the
        # 380 pixels it gets on a laptop (issue 27: a horizontal scroll bar at every width).
        presets = QGridLayout()
        presets.addWidget(QLabel("Preset:"), 0, 0, 1, 2)
        for i, (name, label) in enumerate(PRESET_LABELS.items()):
            button = QPushButton(label)
            button.setCheckable(True)
            button.setToolTip(rich_tooltip(PRESET_HELP[name]))
            button.clicked.connect(lambda _c=False, n=name: self._on_preset_clicked(n))
            self.preset_buttons[name] = button
            presets.addWidget(button, 1 + i // 2, i % 2)
        # Not a preset (it leaves the algorithm variant alone): what a small pretrained model
        # needs beyond the defaults, which were tuned on the built-in demo model.
        self.starter_button = QPushButton(STARTER_LABEL)
        self.starter_button.setToolTip(
            rich_tooltip(
                "Settings measured on a small pretrained model (SmolLM2-135M-Instruct) that "
                "make it learn; the defaults are tuned for the built-in demo model. Sets:",
                *starter_summary().splitlines(),
                "The rest of the settings stay as they are.",
            )
        )
        self.starter_button.clicked.connect(self._on_starter_clicked)
        presets.addWidget(self.starter_button, 1 + (len(PRESET_LABELS) + 1) // 2, 0, 1, 2)
        self.advanced_box = QCheckBox("Show advanced settings")
        self.advanced_box.setToolTip("Clipping, schedules, micro-batches and other fine controls")
        self.batch_label = wrapped_label(muted=True)
        self.change_note = ChangeNote(model, self)  # what a preset changed, with Undo
        self.problems_note = note_label("error")
        self.warnings_note = note_label("warning")

        self.forms: dict[str, ConfigForm] = {}
        inner = QWidget()
        col = QVBoxLayout(inner)
        titles = {"algorithm": "GRPO algorithm", "run": "Run", "alerts": "Health alarms"}
        for section in HYPER_SECTIONS:
            fields = [(section, f.name) for f in dataclasses.fields(SECTIONS[section])]
            form = ConfigForm(model, fields)
            self.forms[section] = form
            box = QGroupBox(titles[section])
            QVBoxLayout(box).addWidget(form)
            col.addWidget(box)
        col.setContentsMargins(0, 0, 0, 0)
        col.addStretch(1)
        # no scroll area of its own: the dock's scrolls (two scroll bars side by side before)

        layout = QVBoxLayout(self)
        layout.addLayout(presets)
        layout.addWidget(self.change_note)
        layout.addWidget(self.advanced_box)
        layout.addWidget(self.batch_label)
        layout.addWidget(self.problems_note)
        layout.addWidget(self.warnings_note)
        layout.addWidget(inner, 1)

        self.advanced_box.toggled.connect(self.set_advanced_visible)
        model.config_changed.connect(self._refresh)
        model.config_replaced.connect(self._refresh)
        model.config_replaced.connect(self._on_model_config_replaced)
        self._applying = False
        self.set_advanced_visible(False)
        self._refresh()

    def set_advanced_visible(self, visible: bool) -> None:
        if self.advanced_box.isChecked() != visible:
            self.advanced_box.setChecked(visible)
        for form in self.forms.values():
            form.set_advanced_visible(visible)

    def _on_preset_clicked(self, name: str) -> None:
        self._apply(f"The {PRESET_LABELS[name]} preset", lambda: self.model.apply_preset(name))

    def _on_starter_clicked(self) -> None:
        self._apply(f"“{STARTER_LABEL}”", self.model.apply_starter)

    def _apply(self, title: str, apply) -> None:
        """Apply a preset and say what it changed, with Undo."""
        before = copy.deepcopy(self.model.config)
        self._applying = True
        try:
            apply()
        finally:
            self._applying = False
        self.change_note.show_changes(title, before, self.model.config)

    def _on_model_config_replaced(self) -> None:
        if not self._applying:  # another file or an undo: the note is about old settings
            self.change_note.clear()

    def _refresh(self, *_args) -> None:
        a = self.model.config.algorithm
        self.batch_label.setText(
            f"Each step samples B × G = {a.prompts_per_step} × {a.num_generations} = "
            f"{a.prompts_per_step * a.num_generations} answers of up to "
            f"{a.max_completion_length} tokens."
        )
        current = self.model.matching_preset()
        for name, button in self.preset_buttons.items():
            button.setChecked(name == current)
        problems = self.model.problems()
        mine = [
            p
            for p in problems
            for key, section, _ in CROSS_FIELD
            if key in p and section in HYPER_SECTIONS
        ]
        set_note(self.problems_note, "\n".join(plain_message(p) for p in mine))
        hyper_warnings = [w for w in self.model.warnings() if "temperature" in w]
        set_note(self.warnings_note, "\n".join(hyper_warnings))

    def fields(self) -> list[tuple[str, str]]:
        return [key for form in self.forms.values() for key in form.editors]
