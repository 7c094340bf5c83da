"""The Model panel: which model to train, how to load it (quantization), its LoRA adapters, and
what this computer offers (GPU name and VRAM, or CPU and RAM).

The model box takes a local folder, a hub id, builtin:demo or a GGUF file, and lists the models
already in the local Hugging Face cache. Below it, a list shows the GGUF models Ollama and LM
Studio keep on this computer, two lines each (name; app, architecture, quantization, size: the
panel is a dock 380 pixels wide; the path in the tooltip, and, greyed, why one cannot be
trained): choosing one puts its file (an Ollama blob has no .gguf suffix) into
model.name_or_path. Both scans run off the GUI thread. A GGUF model gets a note saying what
happens to it: imported once (dequantized into a model folder in the app's cache, reused next
time; engine/models/gguf_import.py), and, from a quantized file, a little below the original
model; one transformers cannot read gets an error note naming what it reads. `start_blocker`
tells Start at once that a hub id not in the cache cannot be downloaded while offline. 4-bit quantization is disabled, with the reason, when the device probe finds no CUDA GPU.
Edits go to the session model only.
Try it: tests/ui/panels/test_panels.py, tests/ui/panels/test_model_list.py.
"""

from __future__ import annotations

import os
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.export.modelfile import grpo_model_name
from grpo_desktop.engine.models.gguf_import import (
    cache_root,
    check_supported,
    imported_folder,
    quantization_bits,
)
from grpo_desktop.engine.models.gguf_info import is_gguf_file, read_gguf_info
from grpo_desktop.engine.models.local_models import lmstudio_roots, ollama_model_file, ollama_roots
from grpo_desktop.engine.units import size_text
from grpo_desktop.ui.common.form import ConfigForm, messages_for, tooltip_for
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import note_label, set_note, wrapped_label
from grpo_desktop.ui.run.system_info import (
    cached_models,
    describe_device,
    hub_cache_dir,
    local_models,
)

BUILTIN = "builtin:demo"
NO_DOUBLE_QUANT = "Only for 4-bit quantization: choose 4-bit above to use it."
NO_LORA = "Off while Use LoRA is off: tick Use LoRA to train adapters of this size."
LORA_DETAILS = ("r", "alpha", "dropout", "target_modules")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # 'Qwen/Qwen2.5-0.5B-Instruct', 'gpt2'


def hub_id_of(value: str) -> str | None:
    """`value` when it names a model on the Hugging Face hub (not builtin:, a file, a folder or an
    Ollama model on this computer), else None."""
    name = value.strip()
    if not name or name.startswith("builtin:") or not HUB_ID.match(name):
        return None
    if os.path.exists(os.path.expanduser(name)) or ollama_model_file(name):
        return None
    return name


def offline_blocker(value: str) -> str:
    """Why a run of model `value` cannot start now: a hub id that is not in the local cache
    while the hub cannot be reached (offline mode, or no connection: checked within 3 s and
    remembered 30 s). The run would otherwise fail after a minute of retries; '' when it can."""
    from grpo_desktop.engine.data.hub import (
        cached_model_folder,
        hub_reachable,
        offline_mode,
        offline_model_message,
    )

    name = hub_id_of(value)
    if name is None or cached_model_folder(name) is not None:
        return ""
    if offline_mode() or not hub_reachable():
        return offline_model_message(name)
    return ""


NO_CUDA = "4-bit needs a CUDA GPU, and PyTorch sees none on this computer."
PATH_ROLE = Qt.ItemDataRole.UserRole


class ModelPanel(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.tasks = BackgroundTasks(self)

        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        self.model_box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.model_box.setToolTip(tooltip_for("model", "name_or_path"))
        self.model_box.lineEdit().setPlaceholderText("folder, hub id, .gguf file, or builtin:demo")
        self.model_box.setObjectName("model.name_or_path")
        self.browse_button = QPushButton("Folder…")
        self.browse_button.setToolTip("Choose a local folder with config.json and *.safetensors")
        self.gguf_button = QPushButton("GGUF file…")
        self.gguf_button.setToolTip(
            "Choose a .gguf model file (llama.cpp, LM Studio, Ollama): it is imported once into "
            "a model folder in the app's cache"
        )
        self.model_note = note_label("error")
        self.gguf_note = note_label("info")
        self.gguf_note.setObjectName("gguf_note")
        self.gguf_problem = note_label("error")  # a GGUF that cannot be read or trained
        self.cache_label = wrapped_label(muted=True)
        self.local_label = wrapped_label(muted=True)
        # Two lines a model (name; app · architecture · quantization · size): the panel lives
        # in a dock 380 pixels wide, where a table of five columns leaves the name no room.
        self.local_list = QListWidget()
        self.local_list.setObjectName("local_models")
        self.local_list.setAlternatingRowColors(True)
        self.local_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # keep the file's end
        self.local_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.local_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.local_list.setSpacing(1)
        self.local_list.hide()
        self.local: list = []  # the LocalModels of the last scan
        self.device_label = wrapped_label()

        pick = QHBoxLayout()
        pick.addWidget(self.browse_button)
        pick.addWidget(self.gguf_button)
        pick.addStretch(1)
        model_box = QGroupBox("Model")
        col = QVBoxLayout(model_box)
        col.addWidget(self.model_box)
        col.addLayout(pick)
        col.addWidget(self.model_note)
        col.addWidget(self.gguf_note)
        col.addWidget(self.gguf_problem)
        col.addWidget(self.cache_label)
        col.addWidget(self.local_label)
        col.addWidget(self.local_list)
        col.addWidget(self.device_label)

        self.quant_form = ConfigForm(
            model, [("quantization", "mode"), ("quantization", "double_quant")]
        )
        self.quant_note = note_label("info")
        quant_box = QGroupBox("Quantization")
        qcol = QVBoxLayout(quant_box)
        qcol.addWidget(self.quant_form)
        qcol.addWidget(self.quant_note)

        self.lora_form = ConfigForm(
            model,
            [("lora", n) for n in ("enabled", *LORA_DETAILS)],
        )
        lora_box = QGroupBox("LoRA adapters")
        QVBoxLayout(lora_box).addWidget(self.lora_form)

        self.load_form = ConfigForm(
            model,
            [
                ("model", "device"),
                ("model", "dtype"),
                ("model", "sampling_precision"),
                ("model", "gradient_checkpointing"),
                ("model", "trust_remote_code"),
            ],
        )
        load_box = QGroupBox("Loading")
        QVBoxLayout(load_box).addWidget(self.load_form)

        layout = QVBoxLayout(self)
        for box in (model_box, quant_box, lora_box, load_box):
            layout.addWidget(box)
        layout.addStretch(1)

        self.quant_combo: QComboBox = self.quant_form.editors[("quantization", "mode")].widget
        self.model_box.lineEdit().editingFinished.connect(self._on_model_box_edited)
        self.model_box.activated.connect(self._on_model_box_edited)
        self.browse_button.clicked.connect(self._on_browse_clicked)
        self.gguf_button.clicked.connect(self._on_gguf_clicked)
        self.local_list.itemClicked.connect(self._on_local_item_chosen)
        self.local_list.itemActivated.connect(self._on_local_item_chosen)
        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self._load)
        model.device_info_changed.connect(self._on_model_device_info_changed)
        model.run_started.connect(self._on_model_run_started)
        self._fill_models([])
        self._load()
        self._on_model_device_info_changed(model.device_info)
        self.local_label.setText("Looking for Ollama and LM Studio models on this computer…")
        self.tasks.submit("scan", cached_models, self._on_scan_done)
        self.tasks.submit("local", local_models, self._on_local_scan_done)

    # -- model choice

    def _fill_models(self, cached: list[str]) -> None:
        current = self.model.value("model", "name_or_path")
        self.model_box.blockSignals(True)
        self.model_box.clear()
        self.model_box.addItem(BUILTIN)
        self.model_box.setItemData(
            0, "The small arithmetic model that ships with the app", Qt.ItemDataRole.ToolTipRole
        )
        for name in cached:
            self.model_box.addItem(name)
            self.model_box.setItemData(
                self.model_box.count() - 1,
                "In your Hugging Face cache",
                Qt.ItemDataRole.ToolTipRole,
            )
        self.model_box.setEditText(current)
        self.model_box.blockSignals(False)

    def _on_scan_done(self, cached, error) -> None:
        cached = cached or []
        self._fill_models(cached)
        where = hub_cache_dir()
        if cached:
            self.cache_label.setText(
                f"{len(cached)} model(s) found in your Hugging Face cache ({where}); pick one "
                "from the list, or type a hub id to download it when the run starts."
            )
        else:
            self.cache_label.setText(
                "No models in your Hugging Face cache yet. Type a hub id (for example "
                "Qwen/Qwen2.5-0.5B-Instruct) to download it when the run starts, or choose a "
                "local folder."
            )

    def _on_local_scan_done(self, found, error) -> None:
        models, skipped, problems = found if found else ([], [], {})
        self.local = list(models)
        self.local_list.clear()
        grey = self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        for m in self.local:
            shown = m.name if m.source == "ollama" else os.path.basename(m.path)
            item = QListWidgetItem(f"{shown}\n{m.app} · {m.summary()}")
            item.setData(PATH_ROLE, m.path)
            tip = f"{m.name}\n{m.app}: {m.path}"
            if m.path in problems:
                tip += f"\n\nCannot be trained: {problems[m.path]}"
                item.setForeground(grey)
            item.setToolTip(tip)
            self.local_list.addItem(item)
        rows = min(max(len(self.local), 1), 5)
        row = self.local_list.sizeHintForRow(0) if self.local else 0
        row = max(row, 2 * self.fontMetrics().lineSpacing() + 4)
        self.local_list.setFixedHeight(rows * row + 2 * self.local_list.frameWidth() + 2)
        self.local_list.setVisible(bool(self.local))
        looked = "\n".join(["Looked in:", *ollama_roots(), *lmstudio_roots()])
        if error is not None:
            text = f"Could not look for Ollama and LM Studio models: {error}"
        elif self.local:
            text = (
                f"{len(self.local)} model(s) that Ollama and LM Studio keep on this computer; "
                "click one to train it."
            )
        else:
            text = (
                "No Ollama or LM Studio models on this computer (hover for the folders looked in)."
            )
        if skipped:
            text += f" {len(skipped)} could not be read (hover for why)."
            looked += "\n\nNot listed:\n" + "\n".join(why for _path, why in skipped)
        self.local_label.setText(text)
        self.local_label.setToolTip(looked)
        self._select_local()
        self._refresh_gguf_note()

    def _on_local_item_chosen(self, item: QListWidgetItem) -> None:
        path = item.data(PATH_ROLE)
        if path and path != self.model.value("model", "name_or_path"):
            self._show_path(path)
            self.model.set_value("model", "name_or_path", path)

    def _show_path(self, path: str) -> None:
        """A chosen file in the model box, shown from its start (the folder it is in)."""
        self.model_box.setEditText(path)
        self.model_box.lineEdit().setCursorPosition(0)

    def _select_local(self) -> None:
        """Select the listed model that is the session's, if any."""
        listed = self._listed(self.model.value("model", "name_or_path"))
        self.local_list.blockSignals(True)
        self.local_list.clearSelection()
        if listed is not None:
            item = self.local_list.item(self.local.index(listed))
            item.setSelected(True)
            self.local_list.scrollToItem(item)
        self.local_list.blockSignals(False)

    def _listed(self, value: str):
        """The listed model whose file `value` is (the same path first, then the same file
        through links), or None."""
        path = os.path.expanduser(value.strip()) if value else ""
        if not path:
            return None
        same = [m for m in self.local if m.path == path]
        real = os.path.realpath(path)
        return next(iter(same), None) or next(
            (m for m in self.local if os.path.realpath(m.path) == real), None
        )

    def _refresh_gguf_note(self) -> None:
        about, problem = self.gguf_text(self.model.value("model", "name_or_path"))
        set_note(self.gguf_note, about)
        set_note(self.gguf_problem, problem)

    def gguf_text(self, value: str) -> tuple[str, str]:
        """(what the panel says about a GGUF model, why it cannot be trained); ('', '') for a
        model that is not a GGUF file."""
        path = ollama_model_file(value) or os.path.expanduser(value.strip())  # 'smollm2:135m'
        if not is_gguf_file(path):
            return "", ""
        try:
            info = read_gguf_info(path)
            check_supported(info)
        except UserError as exc:
            return "", str(exc)
        origin = self._listed(path)
        what = f"{origin.name} from {origin.app}" if origin else os.path.basename(path)
        done = imported_folder(path)
        text = (
            f"GGUF model {what} ({info.architecture}, {info.quantization}, "
            f"{size_text(info.size_bytes)}). "
            + (
                "Already imported into the app's cache."
                if done
                else "Imported once, when first used: dequantized into a model folder in the "
                "app's cache, reused next time."
            )
        )
        self.gguf_note.setToolTip(f"The imported model: {done}" if done else f"In {cache_root()}")
        bits = quantization_bits(info.quantization)
        if bits is not None:
            text += (
                f" Dequantized from {bits} bits, its weights are a little below the original "
                "model's."
            )
        else:
            text += f" Its weights are {info.quantization}: the import is the original model."
        if origin is not None and origin.source == "ollama":
            text += f" Export as GGUF brings it back to Ollama as {grpo_model_name(origin.name)}."
        return text, ""

    def _on_model_box_edited(self, *_args) -> None:
        text = self.model_box.currentText().strip()
        self.model.set_value("model", "name_or_path", text)

    def _on_browse_clicked(self) -> None:
        start = self.model_box.currentText()
        folder = QFileDialog.getExistingDirectory(
            self,
            "Choose a model folder",
            start if os.path.isdir(start) else os.path.expanduser("~"),
        )
        if folder:
            self.model_box.setEditText(folder)
            self.model.set_value("model", "name_or_path", folder)

    def _on_gguf_clicked(self) -> None:
        start = os.path.expanduser(self.model_box.currentText())
        path, _filter = QFileDialog.getOpenFileName(
            self,
            "Choose a GGUF model file",
            os.path.dirname(start) if os.path.isfile(start) else os.path.expanduser("~"),
            "GGUF models (*.gguf);;All files (*)",
        )
        if path:
            self._show_path(path)
            self.model.set_value("model", "name_or_path", path)

    def _on_model_run_started(self, _event) -> None:
        self._refresh_gguf_note()  # a GGUF model is imported by now: "Already imported"

    # -- device and quantization

    def _on_model_device_info_changed(self, info: dict) -> None:
        if not info:
            self.device_label.setText("Checking this computer's GPU…")
            return
        self.device_label.setText("This computer: " + describe_device(info))
        item = self.quant_combo.model().item(self.quant_combo.findData("4bit"))
        no_cuda = info.get("probed") and not info.get("cuda")
        item.setEnabled(not no_cuda)
        item.setToolTip(NO_CUDA if no_cuda else "QLoRA: 4-bit NF4 base weights")
        self._update_quant_note()

    def _update_quant_note(self) -> None:
        info = self.model.device_info
        mode = self.model.value("quantization", "mode")
        if info.get("probed") and not info.get("cuda"):
            text = NO_CUDA + " 8-bit runs on the CPU, slowly."
            if mode == "4bit":
                text = "Selected 4-bit, but " + NO_CUDA[0].lower() + NO_CUDA[1:]
            set_note(self.quant_note, text)
        else:
            set_note(self.quant_note, "")

    def _on_model_config_changed(self, section: str, name: str) -> None:
        if (section, name) == ("model", "name_or_path"):
            self._load()
        elif section == "quantization":
            self._update_quant_note()
            self._update_dependent_fields()
        elif section == "lora":
            self._update_dependent_fields()
        else:
            self._refresh_model_note()

    def _load(self) -> None:
        value = self.model.value("model", "name_or_path")
        if self.model_box.currentText() != value:
            self.model_box.setEditText(value)
        self._refresh_model_note()
        self._refresh_gguf_note()
        self._select_local()
        self._update_quant_note()
        self._update_dependent_fields()
        name = hub_id_of(value)
        if name is not None:  # ask the network now, so that Start's check is instant
            self.tasks.submit("hub", lambda: offline_blocker(name), lambda *_r: None)

    def _update_dependent_fields(self) -> None:
        """Double quantization only acts on 4-bit weights, and the LoRA sizes only with LoRA on:
        greyed out otherwise, with the reason in their tooltips."""
        four_bit = self.model.value("quantization", "mode") == "4bit"
        self.quant_form.set_field_enabled("quantization", "double_quant", four_bit, NO_DOUBLE_QUANT)
        lora = bool(self.model.value("lora", "enabled"))
        for name in LORA_DETAILS:
            self.lora_form.set_field_enabled("lora", name, lora, NO_LORA)

    def _refresh_model_note(self) -> None:
        set_note(
            self.model_note, "\n".join(messages_for(self.model.problems(), "model", "name_or_path"))
        )

    def start_blocker(self) -> str:
        """Why Start cannot run this model now (an uncached hub id while offline), else ''."""
        return offline_blocker(self.model.value("model", "name_or_path"))

    # -- for tests and the window

    def fields(self) -> list[tuple[str, str]]:
        return [
            ("model", "name_or_path"),
            *self.quant_form.editors,
            *self.lora_form.editors,
            *self.load_form.editors,
        ]
