"""The settings panels: every config field round-trips between the session model and its widget,
the hyperparameter form is generated from the metadata and covers every field, and each panel's
own behaviour (presets, inline validation, the reward-hacking warning, the checker test, 4-bit
without CUDA, the cached model list, the dataset preview) works."""

from __future__ import annotations

import dataclasses
import html
import json
import os
from typing import Any, get_type_hints

import pytest
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from grpo_desktop.engine.config import PRESETS, SECTIONS, TrainConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.common.widgets import SliderSpin
from grpo_desktop.ui.panels.dataset_panel import DatasetPanel
from grpo_desktop.ui.panels.hyper_panel import HyperPanel
from grpo_desktop.ui.panels.model_panel import ModelPanel
from grpo_desktop.ui.panels.reward_panel import RewardPanel
from grpo_desktop.ui.session.model import SessionModel

PANELS = (ModelPanel, DatasetPanel, RewardPanel, HyperPanel)


@pytest.fixture
def model(qtbot, tmp_path):
    return SessionModel(SessionDocument(str(tmp_path / "panels.grpo"), demo_config()))


def make(qtbot, cls, model):
    panel = cls(model)
    qtbot.addWidget(panel)
    return panel


def all_fields() -> set[tuple[str, str]]:
    return {(s, f.name) for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)}


def other_value(section: str, name: str, current: Any) -> Any:
    """A valid value different from `current`, chosen from the field's metadata."""
    cls = SECTIONS[section]
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta, kind = f.metadata, get_type_hints(cls)[name]
    if kind is bool:
        return not current
    if "choices" in meta:
        return next(c for c in meta["choices"] if c != current)
    if kind is int:
        return current + 1 if current + 1 <= meta.get("max", 1e9) else current - 1
    if kind is float:
        value = round(current * 2 if current else 0.5, 6)
        return value if value <= meta.get("max", 1e9) else meta["min"] + (current - meta["min"]) / 2
    if "float" in str(kind):  # optional float
        return 0.3 if current is None else None
    if (section, name) == ("rewards", "custom_checker"):
        return "def check(completion, answer, prompt):\n    return 1.0\n"
    if kind is dict:  # data.task_options: the task's own settings
        return {} if current else {"max_terms": 3}
    return f"{current}-x" if current else "x"


def widget_value(w: QWidget) -> Any:
    if hasattr(w, "options"):  # TaskOptionsForm (data.task_options)
        return w.options()
    if isinstance(w, SliderSpin):
        return w.value()
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, QComboBox):
        return w.currentData() if w.currentData() is not None else w.currentText()
    if isinstance(w, (QSpinBox, QDoubleSpinBox)):
        return w.value()
    if isinstance(w, QPlainTextEdit):
        return w.toPlainText()
    if isinstance(w, QLineEdit):
        text = w.text()
        try:
            return (
                float(text)
                if text and w.validator() is not None
                else (text or None)
                if w.validator()
                else text
            )
        except ValueError:
            return text
    raise TypeError(type(w))


def edit_widget(w: QWidget, value: Any) -> None:
    """Change a widget as a user would, so its edit signals fire."""
    if hasattr(w, "set_options"):  # TaskOptionsForm (data.task_options)
        w.set_options(value)
    elif isinstance(w, SliderSpin):
        w.spin.setValue(value)
    elif isinstance(w, QCheckBox):
        w.setChecked(value)
    elif isinstance(w, QComboBox):
        index = w.findData(value) if w.findData(value) >= 0 else w.findText(str(value))
        if w.isEditable() and index < 0:
            w.setEditText(str(value))
            w.lineEdit().editingFinished.emit()
        else:
            w.setCurrentIndex(index)
            w.activated.emit(index)
    elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
        w.setValue(value)
    elif isinstance(w, QPlainTextEdit):
        w.setPlainText(value)
    elif isinstance(w, QLineEdit):
        w.setText("" if value is None else (f"{value:g}" if isinstance(value, float) else value))
        w.editingFinished.emit()
    else:
        raise TypeError(type(w))


def field_widget(panel: QWidget, section: str, name: str) -> QWidget:
    w = panel.findChild(QWidget, f"{section}.{name}")
    assert w is not None, f"no widget for {section}.{name}"
    return w


def test_the_panels_cover_every_config_field(qtbot, model):
    covered = [key for cls in PANELS for key in make(qtbot, cls, model).fields()]
    assert set(covered) == all_fields()
    assert len(covered) == len(set(covered)), "a field is edited in two panels"


def test_the_hyperparameter_form_covers_every_algorithm_run_and_alerts_field(qtbot, model):
    panel = make(qtbot, HyperPanel, model)
    sections = ("algorithm", "run", "alerts")
    expected = {(s, f.name) for s in sections for f in dataclasses.fields(SECTIONS[s])}
    assert set(panel.fields()) == expected
    for editor in panel.forms["algorithm"].editors.values():
        assert editor.meta["help"] in html.unescape(editor.widget.toolTip())


@pytest.mark.parametrize("panel_cls", PANELS, ids=lambda c: c.__name__)
def test_each_panel_round_trips_its_fields(qtbot, model, panel_cls):
    panel = make(qtbot, panel_cls, model)
    if panel_cls is DatasetPanel:  # show the file-only fields too
        model.set_value("data", "source", "file")
    if panel_cls is HyperPanel:
        panel.set_advanced_visible(True)
    # Config -> widgets: a config with every field of this panel changed shows in the widgets.
    changed = TrainConfig.from_dict(model.config.to_dict())
    for section, name in panel.fields():
        value = other_value(section, name, getattr(getattr(changed, section), name))
        setattr(getattr(changed, section), name, value)
    model.set_config(changed)
    for section, name in panel.fields():
        expected = getattr(getattr(changed, section), name)
        shown = widget_value(field_widget(panel, section, name))
        assert (
            shown == pytest.approx(expected) if isinstance(expected, float) else shown == expected
        ), (
            section,
            name,
        )
    # Widgets -> config: editing each widget changes exactly that field.
    for section, name in panel.fields():
        before = model.config.to_dict()
        value = other_value(section, name, model.value(section, name))
        edit_widget(field_widget(panel, section, name), value)
        qtbot.waitUntil(lambda s=section, n=name, v=value: model.value(s, n) == v, timeout=3000)
        after = model.config.to_dict()
        before[section][name] = value
        assert after == before, (section, name)


def test_presets_set_the_algorithm_and_show_which_one_matches(qtbot, model):
    panel = make(qtbot, HyperPanel, model)
    panel.preset_buttons["grpo"].click()
    assert panel.preset_buttons["grpo"].isChecked()
    assert model.value("algorithm", "beta") == PRESETS["grpo"]["algorithm"]["beta"]
    panel.preset_buttons["dapo"].click()
    for key, value in PRESETS["dapo"]["algorithm"].items():
        assert model.value("algorithm", key) == value
    assert panel.preset_buttons["dapo"].isChecked() and not panel.preset_buttons["grpo"].isChecked()
    model.set_value("algorithm", "beta", 0.5)
    assert not any(b.isChecked() for b in panel.preset_buttons.values())


def test_advanced_fields_hide_and_show(qtbot, model):
    panel = make(qtbot, HyperPanel, model)
    basic = set(panel.forms["algorithm"].visible_fields())
    assert ("algorithm", "num_generations") in basic and ("algorithm", "epsilon_low") not in basic
    panel.advanced_box.setChecked(True)
    assert ("algorithm", "epsilon_low") in panel.forms["algorithm"].visible_fields()


def test_validation_messages_appear_under_the_field(qtbot, model):
    panel = make(qtbot, HyperPanel, model)
    form = panel.forms["algorithm"]
    assert form.message("algorithm", "scale_rewards") == ""
    model.set_value("algorithm", "loss_type", "dr_grpo")  # Dr. GRPO needs scaling "none"
    assert "Dr. GRPO removes" in form.message("algorithm", "scale_rewards")
    assert "Dr. GRPO removes" in panel.problems_note.text() and not panel.problems_note.isHidden()
    model.set_value("algorithm", "epsilon_high", 0.1)
    assert "below ε low" in form.message("algorithm", "epsilon_high")
    model.set_value("algorithm", "temperature", 0.1)
    assert "low temperature" in panel.warnings_note.text()


def test_the_reward_hacking_warning_follows_the_weights(qtbot, model):
    panel = make(qtbot, RewardPanel, model)
    assert panel.hacking_note.isHidden()
    panel.format.spin.setValue(1.0)  # format = accuracy = 1.0: the lessons' trap
    assert model.value("rewards", "format_weight") == 1.0
    assert (
        not panel.hacking_note.isHidden() and "reward hacking" in panel.hacking_note.text().lower()
    )
    panel.accuracy.slider.setValue(300)  # accuracy 3.0 > format: safe again
    assert model.value("rewards", "accuracy_weight") == 3.0
    assert panel.hacking_note.isHidden()


CHECKER = """def check(completion, answer, prompt):
    if not completion:
        raise ValueError("empty completion")
    return float(answer in completion)
"""


def test_test_checker_shows_each_score_or_error_with_its_line(qtbot, model):
    panel = make(qtbot, RewardPanel, model)
    panel.editor.setPlainText(CHECKER)
    panel.test_checker()
    qtbot.waitUntil(lambda: panel.test_button.isEnabled(), timeout=30_000)
    table = panel.results_table
    # before any run: right, wrong and plain answers to the dataset's first 3 problems, one empty
    assert table.rowCount() == 10
    scores = [table.item(i, 2).text() for i in range(10)]
    assert scores[:9] == ["1", "0", "1"] * 3 and scores[9] == ""
    assert "ValueError at line 3" in table.item(9, 3).text()
    assert panel.editor.error_line == 3
    assert model.value("rewards", "custom_checker") == CHECKER


def test_a_syntax_error_is_shown_at_its_line_as_you_type(qtbot, model):
    panel = make(qtbot, RewardPanel, model)
    panel.editor.setPlainText("def check(c, a, p):\n    return (\n")
    qtbot.waitUntil(lambda: not panel.compile_note.isHidden(), timeout=3000)
    assert "line" in panel.compile_note.text()
    assert panel.editor.error_line in (2, 3)


def test_checker_samples_come_from_the_latest_rollouts(qtbot, model):
    panel = make(qtbot, RewardPanel, model)
    model.history.rollouts.add(1, [{"completion": "c1", "answer": "a1", "prompt": "p1"}])
    assert panel.samples() == [("c1", "a1", "p1")]


def test_four_bit_is_disabled_with_a_reason_without_cuda(qtbot, model):
    panel = make(qtbot, ModelPanel, model)
    model.set_device_info({"probed": True, "cuda": False, "cpu_count": 2, "ram": 8 * 2**30})
    item = panel.quant_combo.model().item(panel.quant_combo.findData("4bit"))
    assert not item.isEnabled() and "CUDA" in item.toolTip()
    assert "2 cores" in panel.device_label.text() and "8.0 GB RAM" in panel.device_label.text()
    model.set_device_info(
        {"probed": True, "cuda": True, "gpu_name": "RTX 4090", "gpu_memory": 24 * 2**30}
    )
    assert item.isEnabled() and "RTX 4090 · 24.0 GB VRAM" in panel.device_label.text()


def test_models_in_the_hugging_face_cache_are_listed(qtbot, model, tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "datasets--x--y").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    panel = make(qtbot, ModelPanel, model)
    box = panel.model_box
    qtbot.waitUntil(lambda: box.count() == 2, timeout=5000)
    assert [box.itemText(i) for i in range(2)] == ["builtin:demo", "Qwen/Qwen2.5-0.5B"]
    assert "1 model(s) found" in panel.cache_label.text()
    assert box.currentText() == "builtin:demo"


def test_dataset_preview_shows_columns_counts_and_templated_prompts(
    qtbot, model, tmp_path, tiny_model_dir
):
    path = tmp_path / "problems.jsonl"
    rows = [{"problem": f"What is {i} + {i}?", "solution": f"#### {2 * i}"} for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model.set_value("model", "name_or_path", tiny_model_dir)
    panel = make(qtbot, DatasetPanel, model)
    panel.show()
    edit_widget(panel.source_box, "file")
    edit_widget(panel.path_edit, str(path))
    edit_widget(panel.prompt_box, "problem")
    edit_widget(panel.answer_box, "solution")
    model.set_value("data", "eval_size", 8)
    qtbot.waitUntil(
        lambda: (
            panel.table.rowCount() == 8
            and panel.preview.get("train") == 32
            and panel.table.item(0, 0).text().endswith("<|assistant|>")
        ),
        timeout=20_000,
    )
    assert [panel.prompt_box.itemText(i) for i in range(panel.prompt_box.count())] == [
        "problem",
        "solution",
    ]
    assert "32</b> problems for training, <b>8</b> held out" in panel.counts_label.text()
    first = panel.table.item(0, 0).text()
    assert first.startswith("<|system|>Think step by step") and "What is 0 + 0?" in first
    assert first.endswith("<|assistant|>")  # the tiny model's chat template
    assert panel.table.item(1, 1).text() == "2"  # '#### 2' parsed
    edit_widget(panel.prompt_box, "nope")
    qtbot.waitUntil(lambda: "no column 'nope'" in panel.status_note.text(), timeout=20_000)
    assert panel.table.item(0, 0).text() == ""
    assert not os.path.exists(tmp_path / "run")


def test_dataset_preview_shows_the_worked_example_before_each_problem(qtbot, model, tiny_model_dir):
    model.set_value("model", "name_or_path", tiny_model_dir)
    panel = make(qtbot, DatasetPanel, model)
    panel.show()
    edit_widget(field_widget(panel, "data", "example_problem"), "What is 6 × 7?")
    edit_widget(
        field_widget(panel, "data", "example_answer"), "<think>6 × 7</think><answer>42</answer>"
    )

    def first() -> str:
        item = panel.table.item(0, 0)
        return item.text() if item is not None else ""

    qtbot.waitUntil(lambda: "<answer>42</answer>" in first(), timeout=20_000)
    example = "<|user|>What is 6 × 7?<|end|><|assistant|><think>6 × 7</think><answer>42</answer>"
    problem = panel.preview["problems"][0]
    assert 0 < first().index(example) < first().rindex(f"<|user|>{problem}<|end|>")
    assert first().endswith("<|assistant|>")  # the tiny model's chat template


def test_dataset_preview_ends_each_prompt_with_the_answer_prefix(qtbot, model, tiny_model_dir):
    model.set_value("model", "name_or_path", tiny_model_dir)
    panel = make(qtbot, DatasetPanel, model)
    panel.show()
    prefix = field_widget(panel, "data", "answer_prefix")
    assert "prefill" in html.unescape(prefix.toolTip())
    edit_widget(prefix, "<think>")
    assert model.config.data.answer_prefix == "<think>"

    def first() -> str:
        item = panel.table.item(0, 0)
        return item.text() if item is not None else ""

    qtbot.waitUntil(lambda: first().endswith("<|assistant|><think>"), timeout=20_000)
    problem = panel.preview["problems"][0]
    assert first().endswith(f"<|user|>{problem}<|end|><|assistant|><think>")
