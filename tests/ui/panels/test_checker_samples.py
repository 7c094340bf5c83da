"""Issue 27 §3: before any run, *Test checker* tests on the session's own dataset: answers written
for its first problems that have a gold answer (right and wrong in the tags, a plain sentence,
one empty), and the status says where the samples came from. A dataset that cannot be read
falls back to the built-in 17 × 24 examples and says why."""

from __future__ import annotations

import json

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.panels.reward_panel import RewardPanel
from grpo_desktop.ui.session.model import SessionModel

GOLD_CHECKER = """def check(completion, answer, prompt):
    return 1.0 if f"<answer>{answer}</answer>" in completion else 0.0
"""


def _panel(qtbot, tmp_path, **changes) -> RewardPanel:
    cfg = demo_config().replace(**changes) if changes else demo_config()
    model = SessionModel(SessionDocument(str(tmp_path / "checker.grpo"), cfg))
    panel = RewardPanel(model)
    qtbot.addWidget(panel)
    panel.show()
    return panel


def _test(qtbot, panel) -> list[tuple[str, str, str]]:
    panel.editor.setPlainText(GOLD_CHECKER)
    panel.test_checker()
    qtbot.waitUntil(lambda: panel.test_button.isEnabled(), timeout=30_000)
    table = panel.results_table
    return [tuple(table.item(i, c).text() for c in (0, 1, 2)) for i in range(table.rowCount())]


def test_the_file_dataset_s_own_problems_and_gold_answers(qtbot, tmp_path):
    data = tmp_path / "capitals.jsonl"
    rows = [
        {"q": "Capital of France?", "gold": "Paris"},
        {"q": "No answer here", "gold": ""},  # skipped: nothing to check against
        {"q": "Capital of Peru?", "gold": "Lima"},
        {"q": "Capital of Chad?", "gold": "N'Djamena"},
        {"q": "Capital of Fiji?", "gold": "Suva"},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    panel = _panel(
        qtbot,
        tmp_path,
        data={"source": "file", "path": str(data), "prompt_column": "q", "answer_column": "gold"},
    )
    table = _test(qtbot, panel)
    golds = [answer for _completion, answer, _score in table]
    assert golds == ["Paris"] * 3 + ["Lima"] * 3 + ["N'Djamena"] * 3 + ["Paris"]
    assert "408" not in " ".join(c for c, _a, _s in table)
    assert [score for *_rest, score in table] == ["1", "0", "0"] * 3 + ["0"]
    status = panel.test_status.text()
    assert "first 3 problems of your dataset capitals.jsonl" in status and "gold answers" in status
    assert "Capital of Peru?" in panel.results_table.item(3, 0).toolTip()


def test_the_built_in_arithmetic_problems_name_their_level(qtbot, tmp_path):
    panel = _panel(qtbot, tmp_path)
    table = _test(qtbot, panel)
    assert len(table) == 10 and all(answer for _c, answer, _s in table)
    assert "built-in arithmetic problems (level" in panel.test_status.text()
    assert not any(answer == "408" for _c, answer, _s in table)


@pytest.mark.parametrize("path", ["missing.jsonl"])
def test_an_unreadable_dataset_falls_back_and_says_why(qtbot, tmp_path, path):
    panel = _panel(qtbot, tmp_path, data={"source": "file", "path": str(tmp_path / path)})
    table = _test(qtbot, panel)
    assert {answer for _c, answer, _s in table} == {"408"}
    status = panel.test_status.text()
    assert "built-in examples (17 × 24)" in status and "missing.jsonl" in status
    assert "could not be read" in status


def test_after_a_run_it_tests_the_latest_answers(qtbot, tmp_path):
    panel = _panel(qtbot, tmp_path)
    panel.model.history.rollouts.add(
        1, [{"completion": "<answer>9</answer>", "answer": "9", "prompt": "4 + 5?"}]
    )
    assert _test(qtbot, panel) == [("<answer>9</answer>", "9", "1")]
    assert "the run's latest 1 answer." in panel.test_status.text()
