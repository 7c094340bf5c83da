"""File ▸ Export… (Ctrl+E): export the session's run as an adapter, a merged model, GGUF or a
TRL project, with a progress bar and Cancel, then "Open folder" and "Copy path".

The dialog lists the run's checkpoints (newest first), the formats with a line on what each is
for, the output folder (by default a new folder in '<session> exports' beside the session,
engine/export/location.py; typed, or chosen with Choose…: an empty folder is used as it is, a
non-empty one gets a new folder inside named after the run, step and format), and the expected
size read from the files before anything is loaded (engine/export/plan.py; for a 4-bit or 8-bit
run's merged or GGUF export it says why the result is bfloat16 and how large; a TRL project's
size is measured by writing it into a temporary folder, in the background, since a large
dataset makes that take a while). Export runs
`engine.export.pipeline.export` in an `ExportRunner`'s thread (worker.py); Cancel stops it
between stages (nothing is left behind); errors show in the dialog, never as a traceback. A TRL
project exports the settings in the window, so it works before the first checkpoint; code from
elsewhere in them (a custom checker, the model's own code) goes in only once trusted (the
window's trust questions), and the project's train.py asks again where it is not trusted.

What this does not do: write anything itself, or export while a run trains (Export is disabled
and says why). Try it: tests/ui/export/test_export.py.
"""

from __future__ import annotations

import os

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.export.location import exports_folder, unused
from grpo_desktop.engine.export.plan import plan_export
from grpo_desktop.engine.units import size_text
from grpo_desktop.ui.common.slots import connect_slots
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import wrapped_label
from grpo_desktop.ui.export.checkpoints import CheckpointList, PathButtons
from grpo_desktop.ui.export.worker import ExportRunner

MEASURING = "measuring…"  # the size label while the TRL project is measured

FORMATS = [  # (label, engine format, GGUF outtype, what it is for)
    ("LoRA adapter (PEFT)", "adapter", "f16",
     "The small adapter alone, with the tokenizer: load it on the base model with "
     "PeftModel.from_pretrained. Needs the base model."),
    ("Merged model (transformers)", "merged", "f16",
     "The whole model with the adapter merged in: safetensors, tokenizer, chat template and "
     "stop tokens; loads with AutoModelForCausalLM.from_pretrained."),
    ("GGUF f16 (llama.cpp, Ollama, LM Studio)", "gguf", "f16",
     "One .gguf file in 16-bit and an Ollama Modelfile (Llama and Qwen2 models with a BPE or "
     "SentencePiece tokenizer)."),
    ("GGUF q8_0 (smaller, near-lossless)", "gguf", "q8_0",
     "One .gguf file with 8-bit weights (about half of f16) and an Ollama Modelfile."),
    ("TRL project (multi-GPU training)", "trl", "f16",
     "A folder with train.py for TRL's GRPOTrainer and accelerate configs (one GPU, several, "
     "DeepSpeed, FSDP, SLURM) with these settings: to continue at scale."),
]  # fmt: skip
NOT_EXPORTED_CHECKER = (
    "Not exported: the session's custom checker came from elsewhere and is not trusted, and the "
    "project would run it wherever it trains. Trust it (Export asks, or Trust and enable in the "
    "Reward panel), or remove it there, then export again."
)
NOT_EXPORTED_MODEL_CODE = (
    "Not exported: the model's own Python code (Trust remote code) is not trusted, and the "
    "project would run it wherever it trains. Trust it when Export asks, or turn off Trust "
    "remote code in the Model panel, then export again."
)
TRAINING = "Training is running: export once it has stopped or finished (Stop saves a checkpoint)."


def _stacked(*widgets: QWidget) -> QWidget:
    """Widgets one under the other with no gap: a field and its explanation."""
    box = QWidget()
    col = QVBoxLayout(box)
    col.setContentsMargins(0, 0, 0, 0)
    col.setSpacing(2)
    for w in widgets:
        col.addWidget(w)
    return box


class ExportDialog(QDialog):
    """See the module docstring. `model`: the window's SessionModel."""

    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.runner = ExportRunner(self)
        self.result: dict | None = None
        self._replace_confirmed = False
        self.setWindowTitle("Export")
        self.setMinimumWidth(620)

        self.checkpoints = CheckpointList()
        self.format_box = QComboBox()
        for label, *_rest in FORMATS:
            self.format_box.addItem(label)
        self.format_box.setCurrentIndex(1)
        self.format_note = wrapped_label(muted=True)
        self.out_edit = QLineEdit()
        self.out_edit.setPlaceholderText("the folder to write (new or empty)")
        self.choose_button = QPushButton("Choose…")
        out_row = QHBoxLayout()
        out_row.addWidget(self.out_edit, 1)
        out_row.addWidget(self.choose_button)
        self.size_label = wrapped_label()
        self.reason_label = wrapped_label(muted=True)
        self.reason_label.hide()

        form = QFormLayout()
        form.addRow("Checkpoint:", self.checkpoints)
        form.addRow("Format:", _stacked(self.format_box, self.format_note))
        form.addRow("Output folder:", out_row)
        form.addRow("Expected size:", _stacked(self.size_label, self.reason_label))

        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.status = wrapped_label()
        self.done_buttons = PathButtons("export")
        self.done_buttons.hide()
        done_row = QHBoxLayout()
        done_row.addWidget(self.status, 1)
        done_row.addWidget(self.done_buttons)

        self.buttons = QDialogButtonBox()
        self.export_button = self.buttons.addButton(
            "Export", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.cancel_button = self.buttons.addButton(
            "Cancel", QDialogButtonBox.ButtonRole.RejectRole
        )
        self.close_button = self.buttons.addButton("Close", QDialogButtonBox.ButtonRole.RejectRole)
        self.export_button.setDefault(True)

        col = QVBoxLayout(self)
        col.addWidget(QLabel(f"<b>Export the run of {self._session_name()}</b>"))
        col.addLayout(form)
        col.addWidget(self.progress)
        col.addLayout(done_row)
        col.addStretch(1)  # extra height goes here, not between the fields
        col.addWidget(self.buttons)

        self.export_button.clicked.connect(self.start_export)
        self.cancel_button.clicked.connect(self.cancel_export)
        self.close_button.clicked.connect(self.reject)
        self.choose_button.clicked.connect(self.choose_folder)
        self.format_box.currentIndexChanged.connect(self._on_format_box_current_index_changed)
        self.checkpoints.selection_changed.connect(self._on_checkpoints_selection_changed)
        self.out_edit.textEdited.connect(self._on_out_edit_text_edited)
        self.model.state_changed.connect(self._on_model_state_changed)
        connect_slots(self.runner, self, "progressed", "succeeded", "failed", "finished",
                      name="runner")  # fmt: skip
        self._out_typed = False
        self._problem = ""
        self._tasks = BackgroundTasks(self)
        self.checkpoints.load(self.model.run_dir)
        self._set_busy(False)
        self._refresh()

    # ------------------------------------------------------------------ what is chosen

    def _session_name(self) -> str:
        name = os.path.basename(self.model.doc.path.rstrip(os.sep))
        return name[: -len(".grpo")] if name.endswith(".grpo") else name

    def chosen(self) -> tuple[str, str, str]:
        """(label, engine format, GGUF outtype) of the chosen format."""
        label, fmt, outtype, _note = FORMATS[self.format_box.currentIndex()]
        return label, fmt, outtype

    def set_format(self, fmt: str, outtype: str = "f16") -> None:
        for i, (_label, f, o, _note) in enumerate(FORMATS):
            if f == fmt and (f != "gguf" or o == outtype):
                self.format_box.setCurrentIndex(i)
                return
        raise ValueError(fmt)

    def _suggested_name(self) -> str:
        _label, fmt, outtype = self.chosen()
        chosen = self.checkpoints.selected()
        step = f"-step{chosen[0]}" if chosen and fmt != "trl" else ""
        kind = f"gguf-{outtype}" if fmt == "gguf" else fmt
        return f"{self._session_name()}{step}-{kind}".replace(" ", "-")

    def _default_parent(self) -> str:
        """'<session> exports' beside the session (a visible folder for an untitled one)."""
        return exports_folder(self.model.doc.path)

    def _plan(self):
        _label, fmt, outtype = self.chosen()
        if fmt == "trl":
            return plan_export(self.model.config, "trl")
        chosen = self.checkpoints.selected()
        return plan_export(self.model.run_dir, fmt, chosen[0] if chosen else None, outtype)

    def _refresh(self) -> None:
        _label, fmt, _outtype = self.chosen()
        self.format_note.setText(FORMATS[self.format_box.currentIndex()][3])
        if not self._out_typed:
            self.out_edit.setText(
                unused(os.path.join(self._default_parent(), self._suggested_name()))
            )
        self.checkpoints.setEnabled(fmt != "trl")
        self._tasks.cancel("plan")
        if self.model.running:
            self._show_plan(None, TRAINING)
        elif fmt == "trl":
            cfg = self.model.config
            self._tasks.submit("plan", lambda: plan_export(cfg, "trl"), self._on_trl_plan)
            self._show_plan(None, "", measuring=True)
        else:
            try:
                self._show_plan(self._plan(), "")
            except UserError as exc:
                self._show_plan(None, str(exc))

    def _on_trl_plan(self, plan, error: Exception | None) -> None:
        if error is None:
            self._show_plan(plan, "")
        elif isinstance(error, UserError):
            self._show_plan(None, str(error))
        else:
            self._show_plan(None, f"The TRL project could not be prepared: {error}")

    def _show_plan(self, plan, problem: str, measuring: bool = False) -> None:
        """The size, why the dtype, and whether Export may start (`problem` says why not)."""
        _label, fmt, _outtype = self.chosen()
        self.reason_label.hide()
        if plan is not None:
            self.size_label.setText(f"about {size_text(plan.result_bytes)}" + (
                f" (and {size_text(plan.needed_bytes - plan.result_bytes)} more while it is "
                "written)" if plan.needed_bytes > plan.result_bytes else ""
            ))  # fmt: skip
            if plan.dtype_reason and fmt in ("merged", "gguf"):
                what = "the merged model (then converted to GGUF)" if fmt == "gguf" else "it"
                self.reason_label.setText(f"Why {what} is bfloat16: {plan.dtype_reason}")
                self.reason_label.show()
        else:
            self.size_label.setText(MEASURING if measuring else "—")
        busy = self.runner.busy
        self.export_button.setEnabled(not problem and not busy)
        self.export_button.setToolTip(problem)
        if not busy and (problem or self.status.text() == self._problem):
            self.status.setText(problem)  # an export's outcome stays until a problem shows
        self._problem = problem

    # ------------------------------------------------------------------ actions

    def choose_folder(self) -> None:
        start = os.path.dirname(self.out_edit.text()) or self._default_parent()
        folder = QFileDialog.getExistingDirectory(self, "Choose where to export", start)
        if not folder:
            return
        if os.path.isdir(folder) and os.listdir(folder):
            folder = os.path.join(folder, self._suggested_name())
        self.out_edit.setText(folder)
        self._out_typed = True
        self._refresh()

    def start_export(self) -> None:
        out = os.path.expanduser(self.out_edit.text().strip())
        if not out:
            self.status.setText("Choose an output folder first.")
            return
        force = False
        if os.path.isdir(out) and os.listdir(out):
            answer = QMessageBox.question(
                self,
                "Replace the folder?",
                f"{out} is not empty. Replace what it holds with the export? (It is replaced "
                "only once the export is complete.)",
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
            force = True
        _label, fmt, outtype = self.chosen()
        if fmt == "trl" and not self._code_trusted():
            return
        chosen = self.checkpoints.selected()
        source = self.model.config if fmt == "trl" else self.model.run_dir
        # the engine refuses an output in or above the run; the session folder is guarded too
        options = {"outtype": outtype, "force": force, "protect": (self.model.doc.path,)}
        if fmt != "trl":
            options["checkpoint"] = chosen[0] if chosen else None
        self.result = None
        self.done_buttons.hide()
        self.progress.setValue(0)
        self.progress.show()
        self.status.setText("Starting…")
        self._set_busy(True)
        self.runner.start(source, fmt, out, **options)

    def _code_trusted(self) -> bool:
        """A TRL project carries the session's code from elsewhere (its custom checker, the
        model's own code) to wherever it trains, so it is exported only once trusted: the same
        questions the window asks before Start (its session controller's). Declined: nothing
        is written and the status says why."""
        session = getattr(self.parent(), "session", None)
        origin = self.model.doc.path
        asked = session is not None
        if not self.model.checker_trusted() and not (asked and session.check_trust(origin)):
            self.status.setText(NOT_EXPORTED_CHECKER)
            return False
        code = self.model.untrusted_model_code()
        if code and not (asked and session.check_model_code(origin)):
            self.status.setText(NOT_EXPORTED_MODEL_CODE)
            return False
        return True

    def cancel_export(self) -> None:
        if self.runner.busy:
            self.runner.cancel()
            self.status.setText("Cancelling after this stage…")
            self.cancel_button.setEnabled(False)

    def _set_busy(self, busy: bool) -> None:
        for w in (self.export_button, self.format_box, self.checkpoints, self.out_edit):
            w.setEnabled(not busy)
        self.choose_button.setEnabled(not busy)
        self.cancel_button.setVisible(busy)
        self.cancel_button.setEnabled(busy)
        self.close_button.setEnabled(not busy)

    # ------------------------------------------------------------------ slots

    def _on_format_box_current_index_changed(self, _index: int) -> None:
        self._refresh()

    def _on_checkpoints_selection_changed(self) -> None:
        if hasattr(self, "format_box"):
            self._refresh()

    def _on_out_edit_text_edited(self, _text: str) -> None:
        self._out_typed = True

    def _on_model_state_changed(self, _state: str) -> None:
        if not self.runner.busy:
            self.checkpoints.load(self.model.run_dir)  # a run that stopped saved one
            self._refresh()

    def _on_runner_progressed(self, fraction: float, message: str) -> None:
        self.progress.setValue(int(fraction * 1000))
        if message and not self.runner.cancelling:
            self.status.setText(message)

    def _on_runner_succeeded(self, summary: dict) -> None:
        self.result = summary
        secs = summary.get("seconds", 0)
        text = f"Exported {size_text(summary['bytes'])} in {secs:.1f} s to {summary['out']}"
        if summary.get("ollama_create"):  # a run on an Ollama model goes back to Ollama
            text += f". To add it to Ollama, run in that folder: {summary['ollama_create']}"
        self.status.setText(text)
        self.done_buttons.set_path(summary["out"])
        self.done_buttons.show()

    def _on_runner_failed(self, message: str, details: str) -> None:
        self.status.setText(message)
        if details:
            self.status.setToolTip(details)

    def _on_runner_finished(self) -> None:
        self.progress.setVisible(self.result is not None)
        self._set_busy(False)
        self._refresh()

    def reject(self) -> None:
        if self.runner.busy:  # Esc or the window's close button while exporting
            self.cancel_export()
            self.runner.wait(None)
        super().reject()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self.runner.busy:
            self.runner.cancel()
            self.runner.wait(None)
        super().closeEvent(event)
