"""The Model panel: which model to train, how to load it (quantization), its LoRA adapters, and
what this computer offers (GPU name and VRAM, or CPU and RAM).

The model box takes a local folder, a hub id or builtin:demo, and lists the models already in the
local Hugging Face cache (scanned off the GUI thread). 4-bit quantization is disabled, with the
reason, when the device probe finds no CUDA GPU. Edits go to the session model only.
Try it: tests/ui/panels/test_panels.py.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.common.form import ConfigForm, messages_for, tooltip_for
from grpo_desktop.ui.common.tasks import BackgroundTasks
from grpo_desktop.ui.common.widgets import note_label, set_note, wrapped_label
from grpo_desktop.ui.run.system_info import cached_models, describe_device, hub_cache_dir

BUILTIN = "builtin:demo"
NO_CUDA = "4-bit needs a CUDA GPU, and PyTorch sees none on this computer."


class ModelPanel(QWidget):
    def __init__(self, model, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.tasks = BackgroundTasks(self)

        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        self.model_box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.model_box.setToolTip(tooltip_for("model", "name_or_path"))
        self.model_box.lineEdit().setPlaceholderText("folder, hub id, or builtin:demo")
        self.model_box.setObjectName("model.name_or_path")
        self.browse_button = QPushButton("Folder…")
        self.browse_button.setToolTip("Choose a local folder with config.json and *.safetensors")
        self.model_note = note_label("error")
        self.cache_label = wrapped_label(muted=True)
        self.device_label = wrapped_label()

        pick = QHBoxLayout()
        pick.addWidget(self.model_box, 1)
        pick.addWidget(self.browse_button)
        model_box = QGroupBox("Model")
        col = QVBoxLayout(model_box)
        col.addLayout(pick)
        col.addWidget(self.model_note)
        col.addWidget(self.cache_label)
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
            [("lora", n) for n in ("enabled", "r", "alpha", "dropout", "target_modules")],
        )
        lora_box = QGroupBox("LoRA adapters")
        QVBoxLayout(lora_box).addWidget(self.lora_form)

        self.load_form = ConfigForm(
            model,
            [
                ("model", "device"),
                ("model", "dtype"),
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
        model.config_changed.connect(self._on_model_config_changed)
        model.config_replaced.connect(self._load)
        model.device_info_changed.connect(self._on_model_device_info_changed)
        self._fill_models([])
        self._load()
        self._on_model_device_info_changed(model.device_info)
        self.tasks.submit("scan", cached_models, self._on_scan_done)

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

    # -- device and quantization

    def _on_model_device_info_changed(self, info: dict) -> None:
        if not info:
            self.device_label.setText("Checking this computer's GPU…")
            return
        self.device_label.setText("This computer: " + describe_device(info))
        item = self.quant_combo.model().item(self.quant_combo.findText("4bit"))
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
        else:
            self._refresh_model_note()

    def _load(self) -> None:
        value = self.model.value("model", "name_or_path")
        if self.model_box.currentText() != value:
            self.model_box.setEditText(value)
        self._refresh_model_note()
        self._update_quant_note()

    def _refresh_model_note(self) -> None:
        set_note(
            self.model_note, "\n".join(messages_for(self.model.problems(), "model", "name_or_path"))
        )

    # -- for tests and the window

    def fields(self) -> list[tuple[str, str]]:
        return [
            ("model", "name_or_path"),
            *self.quant_form.editors,
            *self.lora_form.editors,
            *self.load_form.editors,
        ]
