"""Small pieces with hand-computed expectations: smoothing, the float spin box, the inspector's
filter expression and advantage explanation, the code editor's error mark, the None guard."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from grpo_desktop.ui.common.code_editor import CodeEditor
from grpo_desktop.ui.common.widgets import FloatSpinBox
from grpo_desktop.ui.inspector.detail import explain_advantage, highlight_completion
from grpo_desktop.ui.inspector.table import filter_pattern, group_spreads
from grpo_desktop.ui.plots.kit import Smoother, format_value


def test_smoothing_is_a_debiased_ema_extended_incrementally():
    s = Smoother()
    s.set_weight(0.5)
    # EMA with weight w: state = w*state + (1-w)*x, divided by 1 - w^n (debiasing).
    # x = 1: 0.5 / 0.5 = 1. x = 0: 0.25 / 0.75 = 1/3. NaN stays NaN. x = 0: 0.125 / 0.875 = 1/7.
    out = s("k", np.array([1.0, 0.0, np.nan, 0.0]))
    assert (
        out[:2] == pytest.approx([1.0, 1 / 3])
        and np.isnan(out[2])
        and out[3] == pytest.approx(1 / 7)
    )
    more = s("k", np.array([1.0, 0.0, np.nan, 0.0, 1.0]))  # one new point: 0.5625 / 0.9375 = 0.6
    assert more[-1] == pytest.approx(0.6) and len(more) == 5
    s.set_weight(0.0)
    assert list(s("k", np.array([3.0, 4.0]))) == [3.0, 4.0]


def test_float_spin_box_shows_small_numbers_and_steps_1_2_5(qtbot):
    box = FloatSpinBox(log_steps=True)
    qtbot.addWidget(box)
    box.setRange(1e-9, 1.0)
    box.setValue(1e-5)
    assert box.text() == "1e-5"  # as people write it, not Python's 1e-05
    box.stepBy(1)
    assert box.value() == pytest.approx(2e-5)
    box.stepBy(2)
    assert box.value() == pytest.approx(1e-4)  # 2e-5 -> 5e-5 -> 1e-4
    box.stepBy(-1)
    assert box.value() == pytest.approx(5e-5)
    assert box.valueFromText("3e-4") == pytest.approx(3e-4)


def test_filter_pattern_combines_step_sign_and_errors():
    import re

    keys = ["s3;+;e0", "s3;-;e1", "s30;+;e1", "s4;0;e0"]
    match = lambda p: [k for k in keys if re.search(p, k)]  # noqa: E731
    assert match(filter_pattern(3, "", False)) == ["s3;+;e0", "s3;-;e1"]  # not step 30
    assert match(filter_pattern(None, "+", False)) == ["s3;+;e0", "s30;+;e1"]
    assert match(filter_pattern(None, "", True)) == ["s3;-;e1", "s30;+;e1"]
    assert match(filter_pattern(3, "-", True)) == ["s3;-;e1"]


def test_group_spread_and_the_advantage_explanation():
    group = [
        {"group": 0, "reward": r, "advantage": a}
        for r, a in ((1, 1.732), (0, -0.577), (0, -0.577), (0, -0.577))
    ]
    # The lesson's group: rewards 1, 0, 0, 0 -> mean 0.25, population std 0.433.
    assert group_spreads(group)[0] == pytest.approx(0.4330, abs=1e-4)
    text = explain_advantage(group[0], group)
    assert (
        "scored 0.25 on average (spread 0.433)" in text
        and "+1.732" in text
        and "more likely" in text
    )
    flat = [{"group": 0, "reward": 1.0, "advantage": 0.0}] * 4
    assert "teaches nothing" in explain_advantage(flat[0], flat)


def test_completion_highlighting_escapes_and_marks_the_blocks():
    html = highlight_completion("<think>2 < 3</think><answer>4</answer>")
    assert "2 &lt; 3" in html and html.count("<span") == 6  # each tag and each block


def test_code_editor_marks_an_error_line(qtbot):
    editor = CodeEditor()
    qtbot.addWidget(editor)
    editor.setPlainText("a\nb\nc\n")
    editor.mark_error_line(2)
    assert editor.error_line == 2 and len(editor.extraSelections()) == 1
    editor.mark_error_line(None)
    assert editor.extraSelections() == []


def test_format_value():
    assert [format_value(v) for v in (0.0, 0.25, 1234.5, 1e-5)] == [
        "0",
        "0.25",
        "1.23e+03",
        "1e-05",
    ]


def test_the_none_guard_keeps_none_alive():
    from PySide6.QtCore import QObject

    from grpo_desktop.ui import compat

    compat.guard_none_refcount()
    obj = QObject()
    for _ in range(10_000):
        obj.setObjectName("")  # a void Qt call: PySide6 6.12 on Python < 3.12 drops a None ref
    assert sys.getrefcount(None) > 10_000


def test_platform_noise_is_dropped_and_other_qt_messages_pass_on(qapp):
    from PySide6.QtCore import qInstallMessageHandler, qWarning

    from grpo_desktop.ui.compat import PLATFORM_NOISE, drop_platform_noise

    seen = []
    outer = qInstallMessageHandler(lambda kind, context, message: seen.append(message))
    try:
        drop_platform_noise()
        qWarning(PLATFORM_NOISE[0])
        qWarning("QPainter::begin: Paint device returned engine == 0")
    finally:
        qInstallMessageHandler(outer)
    assert seen == ["QPainter::begin: Paint device returned engine == 0"]
