"""reasoning-gym tasks as a data source: the catalogue, problems generated, held-out disjoint
from training, the task's own settings applied, the session round trip, and the message without
the package. Needs reasoning-gym (the `tasks` extra, part of the `test` extra)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo_desktop.engine.config import DataConfig, TrainConfig
from grpo_desktop.engine.data.dataset import load_data, preview_rows
from grpo_desktop.engine.data.tasks import (
    HELD_OUT_SEED_OFFSET,
    task_fields,
    task_info,
    task_names,
    task_problems,
)
from grpo_desktop.engine.errors import DataError
from grpo_desktop.session.document import load_session, new_session, save_session

FOUR = ("basic_arithmetic", "countdown", "knights_knaves", "gsm_symbolic")


def task_data(task: str, **more) -> DataConfig:
    return DataConfig(source="task", task=task, **{"task_size": 40, "eval_size": 12, **more})


@pytest.mark.parametrize("task", FOUR)
def test_problems_are_generated_and_held_out_never_overlaps_training(task):
    data = load_data(task_data(task))
    assert len(data.eval) == 12 and 30 <= len(data.train) <= 40
    assert all(ex.problem and ex.answer for ex in data.train + data.eval)
    assert not {ex.problem for ex in data.train} & {ex.problem for ex in data.eval}
    assert f"seed {HELD_OUT_SEED_OFFSET}" in data.source_desc and "seed 0" in data.source_desc
    again = load_data(task_data(task))
    assert again.train == data.train and again.eval == data.eval  # a pure function of the settings


def test_another_task_seed_gives_other_problems_and_the_run_seed_does_not():
    a = load_data(task_data("basic_arithmetic"), seed=0)
    assert load_data(task_data("basic_arithmetic"), seed=7).train == a.train
    b = load_data(task_data("basic_arithmetic", task_seed=5))
    assert {ex.problem for ex in b.train} != {ex.problem for ex in a.train}


def test_a_task_with_few_distinct_problems_drops_training_repeats_of_held_out_ones():
    # products of two one-digit numbers: at most 81 distinct problems, so 200 repeat a lot
    cfg = task_data(
        "products", task_size=200, eval_size=20, task_options={"min_digits": 1, "max_digits": 1}
    )
    data = load_data(cfg)
    assert len(data.eval) <= 20 and len(data.train) < 200
    held = {ex.problem for ex in data.eval}
    assert not held & {ex.problem for ex in data.train}
    assert len({ex.problem for ex in data.train}) == len(data.train)  # no repeats either
    assert "dropped" in data.source_desc


def test_the_held_out_set_is_as_large_as_asked_when_the_task_repeats_itself():
    # one-digit pairs repeat: 100 drawn gave 92 distinct, and the bench needs 100 unseen problems
    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    cfg = task_data("basic_arithmetic", task_size=2000, eval_size=100, task_options=options)
    data = load_data(cfg)
    held = [ex.problem for ex in data.eval]
    assert len(held) == 100 == len(set(held))
    assert not set(held) & {ex.problem for ex in data.train}
    # too few distinct problems for the request: the drawing stops, and the message says why
    tiny = task_data("products", task_size=50, eval_size=500, task_options={"max_digits": 1})
    with pytest.raises(DataError, match="Lower 'Held-out problems'"):
        load_data(tiny)


def test_the_tasks_own_settings_are_applied_lists_included():
    cfg = task_data(
        "basic_arithmetic",
        task_options={"min_terms": 2, "max_terms": 2, "operators": ["+"], "allow_negation": False},
    )
    for ex in load_data(cfg).train:
        assert ex.problem.count("+") == 1 and "*" not in ex.problem, ex.problem


def test_an_unknown_setting_or_task_names_what_there_is():
    with pytest.raises(DataError, match=r"no setting max_legs .*min_terms"):
        load_data(task_data("basic_arithmetic", task_options={"max_legs": 3}))
    with pytest.raises(DataError, match=r"no task named 'countdwn'"):
        load_data(task_data("countdwn"))
    with pytest.raises(DataError, match="could not generate"):
        load_data(task_data("basic_arithmetic", task_options={"min_terms": 5, "max_terms": 2}))


def test_the_catalogue_describes_each_task_with_an_example_and_its_settings():
    names = task_names()
    assert len(names) > 90 and set(FOUR) <= set(names) and "composite" not in names
    info = task_info("countdown")
    assert "target" in info.description.lower() or "number" in info.description.lower()
    assert "using all of these numbers" in info.example_question and info.example_answer
    fields = {f.name: f for f in task_fields("basic_arithmetic")}
    assert "seed" not in fields and "size" not in fields
    assert fields["min_terms"].kind == "int" and fields["min_terms"].default == 2
    assert fields["allow_parentheses"].kind == "bool"
    assert fields["operators"].kind == "list" and "+" in fields["operators"].default
    assert fields["format_style"].choices == ("simple", "natural")
    assert {f.kind for f in task_fields("gsm_symbolic")} == {"float"}
    kinds = {f.name: f.kind for f in task_fields("time_intervals")}  # dates: not for a form
    assert kinds["min_date"] == "other" and kinds["max_time_difference_seconds"] == "int"


def test_preview_shows_the_first_problems():
    columns, rows = preview_rows(task_data("knights_knaves"), 3)
    assert columns == ["question", "answer"] and len(rows) == 3
    assert "knight" in rows[0]["question"].lower()


def test_task_settings_survive_the_config_and_session_round_trip(tmp_path):
    cfg = TrainConfig().replace(
        data={
            "source": "task",
            "task": "countdown",
            "task_options": {"min_numbers": 3, "max_numbers": 4, "operators": ["+", "*"]},
            "task_size": 300,
            "task_seed": 3,
        }
    )
    assert cfg.validate() == []
    assert TrainConfig.from_json(cfg.to_json()) == cfg
    doc = new_session(str(tmp_path / "s"), cfg)
    save_session(doc)
    back = load_session(str(tmp_path / "s")).config.data
    assert back.task_options == {"min_numbers": 3, "max_numbers": 4, "operators": ["+", "*"]}
    assert (back.source, back.task, back.task_size, back.task_seed) == ("task", "countdown", 300, 3)
    assert task_problems(back).train == task_problems(cfg.data).train


def test_validation_names_a_missing_task_and_bad_settings():
    msgs = TrainConfig().replace(data={"source": "task", "task": " "}).validate()
    assert any("needs a reasoning-gym task name" in m for m in msgs)
    msgs = TrainConfig().replace(data={"source": "task", "task_options": [1]}).validate()
    assert any("data.task_options" in m for m in msgs)


def test_without_reasoning_gym_the_source_says_how_to_install_it():
    code = (
        "import sys; sys.modules['reasoning_gym'] = None\n"
        "from grpo_desktop.engine.config import DataConfig\n"
        "from grpo_desktop.engine.data.dataset import load_data\n"
        "from grpo_desktop.engine.errors import DataError\n"
        "try:\n    load_data(DataConfig(source='task', task='countdown'))\n"
        "except DataError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "reasoning-gym" in out and 'pip install "grpo-desktop[tasks]"' in out


def test_the_config_layer_does_not_import_reasoning_gym():
    code = (
        "import sys; import grpo_desktop.engine.config, grpo_desktop.engine.data.dataset, "
        "grpo_desktop.engine.rewards.task_score; print('reasoning_gym' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_will_it_fit_measures_the_tasks_prompts():
    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.engine.estimate.fit import typical_prompt_tokens
    from grpo_desktop.engine.models.loading import resolve_model_path

    cfg = demo_config().replace(
        data={"source": "task", "task": "countdown", "task_size": 20, "eval_size": 2}
    )
    tokens, how = typical_prompt_tokens(cfg, resolve_model_path("builtin:demo"))
    assert how != "assumed" and tokens > 300  # countdown's instructions: a long prompt
