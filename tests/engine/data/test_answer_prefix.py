"""The answer prefix (data.answer_prefix): text written for the model at the start of every answer
(a prefill such as "<think>"), which it continues.

Why it exists: SmolLM2-135M-Instruct wrote a <think>/<answer> tag in 0.5 % of sampled answers when
only told about them, so the format reward had almost nothing to teach from; started inside
<think>, it writes the rest of the format in a good share of samples, and the format reward can
take it from ~0 to the whole format without a worked example (bench/README.md).

Checked on the real code paths: the prompt under a chat template, one that rejects a system
message and the plain template; what training samples from and scores (the demo model's
`sample_groups`: prompt tokens end in the prefix, every rollout text starts with it and is scored
whole); held-out evaluation; Try, streaming included; a one-step CLI run in a subprocess; the
exported TRL project's prompt tokens and rewards; validation; the session round trip.
"""

from __future__ import annotations

import json

import pytest

from grpo_desktop.engine.config import TrainConfig, validate
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data.dataset import build_prompt, prompt_for, responses
from grpo_desktop.engine.models.tiny import build_tokenizer
from grpo_desktop.engine.rewards.functions import format_reward
from tests.support.hazards import cli

SYSTEM = "Think step by step inside <think></think>, then answer inside <answer></answer>."
PROBLEM = "What is 9 + 5?"
PREFIX = "<think>"


def _no_system_tokenizer():
    tok = build_tokenizer()
    tok.chat_template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        + tok.chat_template
    )
    return tok


# ---------------------------------------------------------------- the prompt


def test_the_prefix_follows_the_generation_prompt_of_every_template():
    tok = build_tokenizer()
    bare = build_prompt(tok, PROBLEM, SYSTEM)
    assert bare.endswith("<|assistant|>")
    assert build_prompt(tok, PROBLEM, SYSTEM, prefix=PREFIX) == bare + PREFIX
    data = TrainConfig().replace(data={"system_prompt": SYSTEM, "answer_prefix": PREFIX}).data
    assert prompt_for(tok, PROBLEM, data) == bare + PREFIX
    # A template that rejects a system message: the instructions move, the prefix stays last.
    no_system = _no_system_tokenizer()
    assert build_prompt(no_system, PROBLEM, SYSTEM, prefix=PREFIX) == (
        build_prompt(no_system, PROBLEM, SYSTEM) + PREFIX
    )
    # The plain template: after "Answer:" and a space, where the answer would start.
    assert build_prompt(None, PROBLEM, SYSTEM, prefix=PREFIX).endswith(
        f"Question: {PROBLEM}\nAnswer: {PREFIX}"
    )
    assert build_prompt(None, PROBLEM, SYSTEM).endswith("Answer:")  # no prefix: as before


def test_responses_are_the_prefix_then_the_completion():
    data = TrainConfig().replace(data={"answer_prefix": PREFIX}).data
    assert responses(data, ["9 + 5 = 14</think>", ""]) == ["<think>9 + 5 = 14</think>", PREFIX]
    assert responses(TrainConfig().data, ["a", "b"]) == ["a", "b"]


def test_validation_names_a_prefix_that_is_really_instructions():
    long = TrainConfig().replace(data={"answer_prefix": "x" * 300})
    messages = validate(long)
    assert any("Answer starts with" in m and "300 characters" in m for m in messages), messages
    assert not validate(TrainConfig().replace(data={"answer_prefix": PREFIX}))


def test_the_prefix_survives_the_config_and_session_round_trip(tmp_path):
    from grpo_desktop.session.document import load_session, new_session, save_session

    cfg = demo_config().replace(data={"answer_prefix": PREFIX})
    assert TrainConfig.from_json(cfg.to_json()).data.answer_prefix == PREFIX
    doc = new_session(str(tmp_path / "s.grpo"), cfg)
    save_session(doc)
    assert load_session(doc.path).config.data.answer_prefix == PREFIX


# ---------------------------------------------------------------- training, evaluation, Try


def _small(prefix: str = PREFIX, **data) -> TrainConfig:
    return demo_config().replace(
        data={"answer_prefix": prefix, "eval_size": 4, "arithmetic_size": 20, **data},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 12},
    )


def test_training_samples_after_the_prefix_and_scores_it_with_the_completion():
    import torch

    from grpo_desktop.engine.data.dataset import load_data
    from grpo_desktop.engine.grpo.step import sample_groups
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.rewards.functions import RewardSet

    # A prefix that holds the whole reasoning part: whether an answer earns the format reward
    # then depends on the prefix being scored with what the model wrote after it.
    prefix = "<think>9 + 5 = 14</think><answer>"
    cfg = _small(prefix)
    torch.manual_seed(0)
    policy = load_policy(cfg)
    examples = load_data(cfg.data, cfg.run.seed).train[:2]
    groups = sample_groups(policy, examples, cfg, RewardSet(cfg.rewards, cfg.data))
    comps = groups.completions
    tok = policy.tokenizer
    for row in range(comps.prompt_ids.size(0)):
        prompt = tok.decode(comps.prompt_ids[row][comps.prompt_mask[row].bool()].tolist())
        assert prompt.endswith(prefix), prompt
        written = tok.decode(
            comps.completion_ids[row][comps.completion_mask[row].bool()].tolist(),
            skip_special_tokens=True,
        )
        assert comps.texts[row] == prefix + written
    credit = cfg.rewards.format_credit
    fmt = format_reward(comps.texts, think_tag="think", answer_tag="answer", credit=credit)
    assert groups.rewards.values["format"] == fmt
    # Scored alone, the completions would have lost the prefix's three tags.
    alone = [text[len(prefix) :] for text in comps.texts]
    ours = format_reward(comps.texts, think_tag="think", answer_tag="answer", credit="per_tag")
    theirs = format_reward(alone, think_tag="think", answer_tag="answer", credit="per_tag")
    assert sum(ours) > sum(theirs)


def test_held_out_evaluation_scores_the_prefix_with_the_answer():
    from grpo_desktop.engine.data.dataset import load_data
    from grpo_desktop.engine.grpo.evaluate import evaluate
    from grpo_desktop.engine.models.loading import load_policy

    cfg = _small()
    policy = load_policy(cfg, for_inference=True)
    held_out = load_data(cfg.data, cfg.run.seed).eval
    result = evaluate(policy, held_out, cfg, step=0, n_samples=len(held_out))
    texts = [s["completion"] for s in result.samples]
    assert len(texts) == len(held_out) == 4
    assert all(text.startswith(PREFIX) for text in texts), texts
    fmt = format_reward(texts, think_tag="think", answer_tag="answer")
    assert result.format_rate == pytest.approx(sum(fmt) / len(fmt))
    # The same problems without the prefix answer from another starting point.
    plain = evaluate(policy, held_out, _small(""), step=0, n_samples=len(held_out))
    assert [s["completion"] for s in plain.samples] != texts


def test_try_streams_and_scores_answers_that_start_with_the_prefix(trained_run):
    from grpo_desktop.engine.data.dataset import Example
    from grpo_desktop.engine.grpo.evaluate import evaluate
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.runs.files import read_run_config
    from grpo_desktop.engine.variants.run_variants import ModelVariants
    from grpo_desktop.engine.variants.try_model import answer_prompt, problem_choices

    run_dir = trained_run(lora=True)
    cfg = read_run_config(run_dir).replace(data={"answer_prefix": PREFIX})
    problem = problem_choices(cfg, "held_out", n=1)[0]
    seen: list[list[str]] = []
    mv = ModelVariants(cfg, run_dir)
    try:
        result = answer_prompt(
            mv, cfg, "base", problem["problem"], problem["answer"], on_text=seen.append
        )
    finally:
        mv.close()
    text = result["samples"][0]["text"]
    assert seen and all(texts[0].startswith(PREFIX) for texts in seen)
    assert seen[-1] == [text]
    base = cfg.replace(algorithm={"beta": 0.0}, lora={"enabled": False})
    evaluated = evaluate(
        load_policy(base), [Example(problem["problem"], problem["answer"])], base, step=0
    )
    assert text == evaluated.samples[0]["completion"]
    score = result["samples"][0]["score"]
    assert (
        score["rewards"]["format"]
        == format_reward(
            [text], think_tag="think", answer_tag="answer", credit=cfg.rewards.format_credit
        )[0]
    )


@pytest.mark.timeout(300)
def test_a_cli_run_with_a_prefix_logs_rollouts_that_start_with_it(tmp_path):
    from grpo_desktop.engine.events import read_events

    cfg = _small().replace(run={"max_steps": 1, "eval_every": 1})
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    code, err = cli("train", "cfg.json", "--out", "run", "--quiet", cwd=tmp_path)
    assert code == 0, err[-3000:]
    events = read_events(str(tmp_path / "run" / "events.jsonl"))
    assert events[-1].type == "run_finished" and events[-1].status == "completed"
    rows = [row for e in events if e.type == "rollouts" for row in e.rows]
    assert rows and all(row["completion"].startswith(PREFIX) for row in rows)
    evals = [e for e in events if e.type == "eval"]
    assert evals and all(s["completion"].startswith(PREFIX) for e in evals for s in e.samples)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["data"]["answer_prefix"] == PREFIX


# ---------------------------------------------------------------- the TRL export


@pytest.mark.parametrize("kind", ["chat", "plain", "bos"])
def test_the_trl_projects_prompts_end_in_the_prefix_and_its_rewards_score_it(
    tmp_path_factory, kind
):
    pytest.importorskip("trl")
    from grpo_desktop.engine.sampling.rollout import prompt_token_ids
    from tests.support.trl_export import BASE, make_project

    cfg = BASE.replace(data={"system_prompt": SYSTEM, "answer_prefix": PREFIX})
    folder, train = make_project(tmp_path_factory, cfg)
    settings = train.load_settings(str(folder / "settings.json"))
    assert settings["data"]["answer_prefix"] == PREFIX
    tok = build_tokenizer()
    if kind == "plain":
        tok.chat_template = None
    elif kind == "bos":  # a template that writes a BOS the tokenizer also adds (as Llama's)
        _add_bos(tok)
        tok.chat_template = "{{ bos_token }}" + tok.chat_template
    made = train.prompt_maker(tok, SYSTEM, None, PREFIX)
    prompt = made(PROBLEM)
    assert isinstance(prompt, str) and prompt.endswith(PREFIX)
    # TRL 1.16 tokenizes a text prompt with the tokenizer's special tokens: as the app's ids.
    assert (
        tok(text=[prompt])["input_ids"][0]
        == prompt_token_ids(tok, [prompt_for(tok, PROBLEM, cfg.data)])[0]
    )
    # Its rewards score the prefix, then the decoded completion.
    rewards = train.AppRewards(settings, tok)
    try:
        ids = [tok("9 + 5 = 14</think><answer>14</answer>", add_special_tokens=False)["input_ids"]]
        fmt = dict(zip(rewards.reward_set.names, rewards.functions()))["format"]
        got = fmt(None, None, ids, [PROBLEM], ["14"])
    finally:
        rewards.close()
    assert got == [1.0]


def _add_bos(tok) -> None:
    """Give the tiny tokenizer a BOS it puts before every text it encodes."""
    from tokenizers.processors import TemplateProcessing

    from grpo_desktop.engine.sampling.rollout import added_bos

    tok.add_special_tokens({"bos_token": "<|bos|>"})
    bos = ("<|bos|>", tok.bos_token_id)
    tok._tokenizer.post_processor = TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[bos]
    )
    assert added_bos(tok) == tok.bos_token_id
