"""Data loading, held-out splits, prompts and batch order, on real files written into tmp_path.

No network: hub tests run with the offline flags set and a cache folder built here.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import pytest

from grpo_desktop.engine.config import DataConfig
from grpo_desktop.engine.data.arithmetic import (
    Problem,
    arithmetic_problems,
    arithmetic_splits,
    problem_count,
)
from grpo_desktop.engine.data.dataset import (
    PLAIN_TEMPLATE,
    Example,
    batch_indices,
    build_prompt,
    load_data,
    parse_answer,
    preview_rows,
)
from grpo_desktop.engine.errors import DataError

ROWS = [
    {
        "question": f"Tom has {i} apples and buys {i + 1} more. How many?",
        "answer": f"#### {2 * i + 1}",
    }
    for i in range(10)
]


def _file_cfg(path: Path, **kw) -> DataConfig:
    return DataConfig(source="file", path=str(path), **{"eval_size": 2, **kw})


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _offline(monkeypatch, hf_home: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)


# ----------------------------------------------------------------------------- arithmetic


def test_arithmetic_is_deterministic_distinct_and_correct():
    problems = arithmetic_problems(500, difficulty=2, seed=7)
    assert problems == arithmetic_problems(500, difficulty=2, seed=7)
    assert problems != arithmetic_problems(500, difficulty=2, seed=8)
    assert len({p.question for p in problems}) == 500
    for p in problems:
        a, b = p.question.removeprefix("What is ").removesuffix("?").split(" × ")
        assert p.answer == str(int(a) * int(b))


@pytest.mark.parametrize(
    ("difficulty", "digits_a", "digits_b"), [(1, 1, 1), (2, 2, 2), (3, 3, 2), (4, 4, 2), (5, 5, 2)]
)
def test_difficulty_sets_the_number_of_digits(difficulty, digits_a, digits_b):
    for p in arithmetic_problems(50, difficulty=difficulty, seed=0):
        a, b = p.question.removeprefix("What is ").removesuffix("?").split(" × ")
        assert (len(a), len(b)) == (digits_a, digits_b)


def test_problem_counts():
    # Level 1: 2-9 × 2-9 = 8 * 8; level 2: 10-99 × 10-99 = 90 * 90; level 3: 900 * 90.
    assert [problem_count(d) for d in (1, 2, 3)] == [64, 8100, 81000]
    with pytest.raises(ValueError, match="1 to 5"):
        problem_count(6)


def test_exclude_is_respected_down_to_the_last_problem():
    everything = arithmetic_problems(64, difficulty=1, seed=0)
    first_half = {p.question for p in everything[:32]}
    rest = arithmetic_problems(32, difficulty=1, seed=3, exclude=first_half)
    assert {p.question for p in rest} == {p.question for p in everything[32:]}
    with pytest.raises(ValueError, match="fewer than the 33"):
        arithmetic_problems(33, difficulty=1, seed=3, exclude=first_half)
    with pytest.raises(ValueError, match="64 distinct problems"):
        arithmetic_problems(65, difficulty=1)


def test_splits_are_disjoint_and_eval_does_not_depend_on_train_size():
    train, held = arithmetic_splits(1000, 50, difficulty=2, seed=1)
    assert (len(train), len(held)) == (1000, 50)
    assert not {p.question for p in train} & {p.question for p in held}
    assert arithmetic_splits(10, 50, difficulty=2, seed=1)[1] == held
    assert all(isinstance(p, Problem) for p in train + held)


def test_load_data_arithmetic():
    data = load_data(DataConfig(arithmetic_size=100, eval_size=10), seed=0)
    assert (len(data.train), len(data.eval)) == (100, 10)
    assert data.columns == ["question", "answer"]
    assert data.train[0] == Example(data.train[0].problem, data.train[0].answer)
    assert "difficulty 2" in data.source_desc


def test_load_data_arithmetic_shrinks_to_fit_a_small_level():
    # Level 1 has 64 problems: at most 64 // 5 = 12 are held out, the other 52 train.
    data = load_data(DataConfig(arithmetic_difficulty=1, arithmetic_size=2000, eval_size=64))
    assert (len(data.train), len(data.eval)) == (52, 12)
    assert not {e.problem for e in data.train} & {e.problem for e in data.eval}
    assert "only 64 distinct problems" in data.source_desc


# ----------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("She sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72"),
        ("#### 1,234", "1234"),
        ("-1,234,567.5", "-1234567.5"),
        ("1,2,3", "1,2,3"),
        (42, "42"),
        (42.0, "42"),
        (2.5, "2.5"),
        ("  Paris \n", "Paris"),
        (None, ""),
        (float("nan"), ""),
    ],
)
def test_parse_answer(raw, expected):
    assert parse_answer(raw) == expected


# ----------------------------------------------------------------------------- sources


def _check_rows_loaded(data, seed_rows=ROWS):
    assert (len(data.train), len(data.eval)) == (8, 2)
    every = {e.problem: e.answer for e in data.train + data.eval}
    assert every == {r["question"]: parse_answer(r["answer"]) for r in seed_rows}
    assert not {e.problem for e in data.train} & {e.problem for e in data.eval}


def test_jsonl_with_gsm8k_answers(tmp_path):
    cfg = _file_cfg(_write_jsonl(tmp_path / "p.jsonl", ROWS))
    data = load_data(cfg, seed=3)
    _check_rows_loaded(data)
    assert data.train[0].answer == "1" or data.eval[0].answer == "1"  # "#### 1" of row 0
    assert data.columns == ["question", "answer"]
    assert load_data(cfg, seed=3) == data  # held-out rows are chosen from the seed alone


def test_json_array_file(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(ROWS, indent=2), encoding="utf-8")
    _check_rows_loaded(load_data(_file_cfg(tmp_path / "p.json")))


def test_csv_file_with_quoted_commas(tmp_path):
    rows = [dict(r, question=r["question"].replace("and", ", and")) for r in ROWS]
    with (tmp_path / "p.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    _check_rows_loaded(load_data(_file_cfg(tmp_path / "p.csv")), rows)


def test_parquet_file_with_other_column_names(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    problems = [r["question"] for r in ROWS] + [None]
    table = pa.table({"problem": problems, "solution": [*range(10), float("nan")]})
    pq.write_table(table, tmp_path / "p.parquet")
    cfg = _file_cfg(tmp_path / "p.parquet", prompt_column="problem", answer_column="solution")
    data = load_data(cfg)
    assert (len(data.train), len(data.eval)) == (8, 2)
    assert "11 rows; skipped 1 with an empty prompt" in data.source_desc
    assert {e.answer for e in data.train + data.eval} == {str(i) for i in range(10)}
    assert data.columns == ["problem", "solution"]


def test_disk_dataset(tmp_path):
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    _check_rows_loaded(load_data(DataConfig(source="disk", path=str(tmp_path / "ds"), eval_size=2)))


def test_disk_dataset_dict_holds_out_from_the_test_split(tmp_path):
    import datasets

    test_rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(5)]
    dd = datasets.DatasetDict(
        train=datasets.Dataset.from_list(ROWS), test=datasets.Dataset.from_list(test_rows)
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    cfg = DataConfig(source="disk", path=str(tmp_path / "dd"), eval_size=3)
    data = load_data(cfg)
    assert len(data.train) == 10  # the whole train split trains
    assert len(data.eval) == 3 and {e.problem for e in data.eval} <= {
        r["question"] for r in test_rows
    }
    assert "'test' split" in data.source_desc
    # Training on 'test' itself carves the held-out rows out of it instead.
    data = load_data(
        DataConfig(source="disk", path=str(tmp_path / "dd"), split="test", eval_size=1)
    )
    assert (len(data.train), len(data.eval)) == (4, 1)
    with pytest.raises(DataError, match=r"split 'test' has 5 usable rows.*at most 5"):
        load_data(DataConfig(source="disk", path=str(tmp_path / "dd"), eval_size=6))
    with pytest.raises(DataError, match="no split 'validation'.*train, test"):
        load_data(DataConfig(source="disk", path=str(tmp_path / "dd"), split="validation"))


def _build_hub_cache(tmp_path: Path) -> Path:
    """A cache folder laid out as a hub download of 'tests/tiny' (train + test) leaves it."""
    import datasets

    src = tmp_path / "src"
    src.mkdir()
    files = {}
    for split, rows in (("train", ROWS), ("test", ROWS[:4])):
        files[split] = str(_write_jsonl(src / f"{split}.jsonl", rows))
    builder = datasets.load_dataset_builder("json", data_files=files, cache_dir=str(tmp_path / "b"))
    builder.download_and_prepare()
    hf_home = tmp_path / "hf"
    target = hf_home / "datasets" / "tests___tiny" / "default" / "0.0.0" / "abc123"
    shutil.copytree(builder.cache_dir, target)
    for arrow in target.glob("json-*.arrow"):  # hub downloads name them <dataset>-<split>.arrow
        arrow.rename(target / arrow.name.replace("json-", "tiny-"))
    return hf_home


def test_hub_dataset_from_the_local_cache(tmp_path, monkeypatch):
    _offline(monkeypatch, _build_hub_cache(tmp_path))
    data = load_data(DataConfig(source="hub", path="tests/tiny", eval_size=2))
    assert len(data.train) == 8  # the 2 held-out test rows repeat train rows: dropped from train
    assert {e.problem for e in data.eval} <= {r["question"] for r in ROWS[:4]}
    assert "dropped 2 training rows" in data.source_desc
    columns, rows = preview_rows(DataConfig(source="hub", path="tests/tiny"), n=3)
    assert columns == ["question", "answer"] and rows == ROWS[:3]
    with pytest.raises(
        DataError,
        match="'tests/tiny \\(subset main\\)' is not in the local cache.*"
        "only its subset\\(s\\) default are",
    ):
        load_data(DataConfig(source="hub", path="tests/tiny", subset="main"))


def test_hub_dataset_not_in_cache_offline_fails_fast(tmp_path, monkeypatch):
    _offline(monkeypatch, tmp_path / "empty-hf-home")
    start = time.monotonic()
    with pytest.raises(DataError) as info:
        load_data(DataConfig(source="hub", path="nobody/no-such-dataset"))
    assert time.monotonic() - start < 5  # a network attempt would retry for ~20 s
    message = str(info.value)
    assert "nobody/no-such-dataset" in message and "cache" in message and "network" in message


# ----------------------------------------------------------------------------- errors


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found: .*nope.jsonl"):
        load_data(_file_cfg(tmp_path / "nope.jsonl"))


def test_malformed_jsonl_line_is_named(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", ROWS[:2])
    path.write_text(path.read_text() + '{"question": "broken", \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"p\.jsonl, line 3 is not valid JSON"):
        load_data(_file_cfg(path))


def test_missing_column_lists_the_columns(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", [{"Question": "q", "target": "1"}] * 3)
    with pytest.raises(DataError) as info:
        load_data(_file_cfg(path, eval_size=1))
    message = str(info.value)
    assert "no column 'question'" in message and "Question, target" in message
    assert "perhaps 'Question'" in message
    with pytest.raises(DataError, match="no column 'answer'.*perhaps 'target'"):
        load_data(_file_cfg(path, eval_size=1, prompt_column="Question"))


@pytest.mark.parametrize(("name", "content"), [("e.jsonl", ""), ("e.csv", "question,answer\n")])
def test_empty_file(tmp_path, name, content):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match="has no rows"):
        load_data(_file_cfg(tmp_path / name))
    with pytest.raises(DataError, match="has no rows"):
        preview_rows(_file_cfg(tmp_path / name))


def test_eval_size_too_large_suggests_a_smaller_one(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", ROWS)
    with pytest.raises(
        DataError, match=r"10 usable rows.*leaves none.*Held-out problems.*e\.g\. to 1"
    ):
        load_data(_file_cfg(path, eval_size=10))


def test_unsupported_extension_and_csv_misalignment(tmp_path):
    (tmp_path / "p.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(DataError, match="unsupported file type '.txt'"):
        load_data(_file_cfg(tmp_path / "p.txt"))
    (tmp_path / "p.csv").write_text("question,answer\nWhat is 1, 2?,3\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2 has more values.*double quotes"):
        load_data(_file_cfg(tmp_path / "p.csv"))


def test_wrong_kind_of_source(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", ROWS)
    with pytest.raises(DataError, match="local path, not a hub id"):
        load_data(DataConfig(source="hub", path=str(path)))
    with pytest.raises(DataError, match="is a file.*data source 'file'"):
        load_data(DataConfig(source="disk", path=str(path)))
    with pytest.raises(DataError, match="not a folder saved with save_to_disk"):
        load_data(DataConfig(source="disk", path=str(tmp_path)))
    with pytest.raises(DataError, match="is a folder.*'disk'"):
        load_data(_file_cfg(tmp_path))
    (tmp_path / "list.jsonl").write_text('{"question": "q", "answer": "1"}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2 holds an array, not a JSON object"):
        load_data(_file_cfg(tmp_path / "list.jsonl"))


def test_rows_without_prompt_or_answer_are_skipped_and_counted(tmp_path):
    rows = [
        *ROWS,
        {"question": "  ", "answer": "1"},
        {"answer": "2"},
        {"question": "q?", "answer": ""},
    ]
    data = load_data(_file_cfg(_write_jsonl(tmp_path / "p.jsonl", rows)))
    assert len(data.train) + len(data.eval) == 10
    assert "skipped 2 with an empty prompt and 1 with an empty answer" in data.source_desc
    blank = _write_jsonl(tmp_path / "blank.jsonl", [{"question": "", "answer": "1"}] * 3)
    with pytest.raises(DataError, match="None of the 3 rows"):
        load_data(_file_cfg(blank))


def test_preview_shows_raw_rows_without_checking_columns(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", ROWS)
    columns, rows = preview_rows(_file_cfg(path, prompt_column="nope"), n=3)
    assert columns == ["question", "answer"] and rows == ROWS[:3]
    columns, rows = preview_rows(DataConfig(arithmetic_difficulty=1), n=100)
    assert columns == ["question", "answer"] and len(rows) == 64  # all of level 1


# ----------------------------------------------------------------------------- prompts


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"
)


@pytest.fixture(scope="module")
def tokenizer():
    """A word-level tokenizer built here: only its chat template matters for these tests."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "What": 1, "is": 2}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_build_prompt_with_a_chat_template(tokenizer):
    tokenizer.chat_template = CHAT_TEMPLATE
    prompt = build_prompt(tokenizer, "What is 7 × 8?", "Answer in tags.")
    assert prompt == "<|system|>Answer in tags.\n<|user|>What is 7 × 8?\n<|assistant|>"
    assert build_prompt(tokenizer, "What is 7 × 8?") == "<|user|>What is 7 × 8?\n<|assistant|>"


def test_build_prompt_moves_the_system_prompt_when_the_template_rejects_it(tokenizer):
    tokenizer.chat_template = NO_SYSTEM_TEMPLATE
    prompt = build_prompt(tokenizer, "What is 7 × 8?", "Answer in tags.")
    assert prompt == "<|user|>Answer in tags.\n\nWhat is 7 × 8?\n<|assistant|>"


def test_build_prompt_plain_template(tokenizer):
    tokenizer.chat_template = None
    expected = "Answer in tags.\n\nQuestion: What is 7 × 8?\nAnswer:"
    assert build_prompt(tokenizer, "What is 7 × 8?", "Answer in tags.") == expected
    assert build_prompt(None, "What is 7 × 8?", "Answer in tags.") == expected
    assert build_prompt(None, "What is 7 × 8?") == "Question: What is 7 × 8?\nAnswer:"
    assert PLAIN_TEMPLATE.format(system="", problem="x") == "Question: x\nAnswer:"


# ----------------------------------------------------------------------------- batch order


def test_batch_indices_cover_every_index_once_per_epoch():
    n, b = 12, 4  # 3 steps per epoch
    for epoch in range(3):
        seen = [i for step in range(3 * epoch, 3 * epoch + 3) for i in batch_indices(n, step, b, 5)]
        assert sorted(seen) == list(range(n))
    first = [i for s in range(3) for i in batch_indices(n, s, b, 5)]
    second = [i for s in range(3, 6) for i in batch_indices(n, s, b, 5)]
    assert first != second  # each epoch has its own order
    assert first != [i for s in range(3) for i in batch_indices(n, s, b, 6)]


def test_batch_indices_resume_exactly():
    uninterrupted = [batch_indices(10, s, 3, 1) for s in range(20)]
    resumed = [batch_indices(10, s, 3, 1) for s in range(7, 20)]  # a fresh call per step
    assert resumed == uninterrupted[7:]


def test_batch_indices_cross_the_epoch_boundary():
    # N = 10, B = 4: step 2 takes positions 8..11 = the last 2 of epoch 0 and the first 2 of epoch 1.
    stream = [i for s in range(5) for i in batch_indices(10, s, 4, 0)]  # positions 0..19
    assert batch_indices(10, 2, 4, 0) == stream[8:12]
    assert sorted(stream[:10]) == sorted(stream[10:20]) == list(range(10))
    # A batch larger than the data spans several epochs and still uses each index once per epoch.
    big = batch_indices(3, 0, 7, 0)
    assert sorted(big[:3]) == sorted(big[3:6]) == [0, 1, 2]
    with pytest.raises(ValueError, match="batch_size"):
        batch_indices(10, 0, 0, 0)


def test_zero_problems_and_no_held_out_split():
    from grpo_desktop.engine.config import DataConfig
    from grpo_desktop.engine.data.arithmetic import arithmetic_problems, arithmetic_splits
    from grpo_desktop.engine.data.dataset import load_data

    assert arithmetic_problems(0, 2, seed=1) == []
    train, held = arithmetic_splits(5, 0, 2, seed=1)
    assert len(train) == 5 and held == []
    data = load_data(DataConfig(eval_size=0, arithmetic_size=20))
    assert len(data.train) == 20 and data.eval == []
