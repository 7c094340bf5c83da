"""One side of bench/real_model.py, in its own process: our engine or TRL's GRPOTrainer training
SmolLM2-135M-Instruct on a reasoning-gym task, with the same held-out evaluation on both sides.

Both sides get their problems from the app's data layer (`load_data`: the task's training and
held-out problems, different seeds, never overlapping), their rewards from the app's reward code
(the task's own checker on the extracted answer, the format reward with the run's credit), and
are evaluated by the app's `evaluate` (greedy, the same prompts and scoring) every `eval_every`
steps and at step 0. Evaluation time is measured and left out of each side's training seconds.

Returns a dict: `evals` (step, accuracy, format_rate, mean_length, train_seconds: training time
before that evaluation), `steps` (step, reward, accuracy and format reward means, mean length,
seconds), `peak_rss_mb` (ru_maxrss at the end) and the wall and evaluation totals.

    python bench/real_model.py --worker ours|trl --config JSON      (as bench/real_model.py runs it)
"""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from grpo_desktop.engine.config import DataConfig
from grpo_desktop.engine.config.starters import (
    SMALL_MODEL_EXAMPLE,
    SMALL_MODEL_STARTER,
    example_answer,
)

# The app's default system prompt, and the starter's worked example and settings
# (engine/config/starters.py: what the app suggests for a small real model, measured here): told
# about the tags only, SmolLM2 never writes one (0 of 96 sampled answers), so no format reward has
# anything to teach; shown one exchange in the format, it answers in it (bench/README.md).
SYSTEM_PROMPT = DataConfig().system_prompt
EXAMPLE = (SMALL_MODEL_EXAMPLE[0], example_answer("think", "answer"))
_STARTER_ALGO = SMALL_MODEL_STARTER["algorithm"]
_STARTER_REWARDS = SMALL_MODEL_STARTER["rewards"]


@dataclass
class RealRun:
    """The settings both sides share (the bench's choice: see bench/README.md)."""

    model: str = ""  # the GGUF file (ours: imported by the app; TRL: the imported folder)
    folder: str = ""  # the imported model folder TRL loads
    task: str = "basic_arithmetic"
    # Sums of two numbers of 1-2 digits ("Calculate 65 + 8."): base accuracy 55 %, inside the
    # 20-60 % the bench wants, and what the model gets wrong (carries) a few steps can teach;
    # bench/README.md says what else was tried.
    task_options: dict = field(
        default_factory=lambda: {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 2,
            "operators": ["+"],
            "allow_parentheses": False,
            "allow_negation": False,
        }
    )
    task_size: int = 2000
    eval_size: int = 100
    steps: int = 40
    eval_every: int = 10
    G: int = _STARTER_ALGO["num_generations"]
    B: int = _STARTER_ALGO["prompts_per_step"]
    max_completion_length: int = _STARTER_ALGO["max_completion_length"]
    learning_rate: float = _STARTER_ALGO["learning_rate"]
    beta: float = _STARTER_ALGO["beta"]
    loss_type: str = _STARTER_ALGO["loss_type"]
    lora_r: int = 16
    lora_alpha: float = 32.0
    temperature: float = 1.0
    system_prompt: str = SYSTEM_PROMPT
    example_problem: str = EXAMPLE[0]
    example_answer: str = EXAMPLE[1]
    # Written for the model at the start of every answer (data.answer_prefix), e.g. "<think>":
    # with no worked example it starts SmolLM2's format from ~0 (bench/README.md).
    answer_prefix: str = ""
    accuracy_weight: float = 1.0
    format_weight: float = _STARTER_REWARDS["format_weight"]
    format_credit: str = _STARTER_REWARDS["format_credit"]
    seed: int = 0
    threads: int = 0  # 0: torch's default
    # Ours only (model.sampling_precision): "bfloat16" rounds the decode's products
    # (engine/sampling/precision.py); TRL samples with its float32 model either way.
    sampling_precision: str = "same"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RealRun:
        raw = json.loads(text)
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


def peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return kb / (1024 * 1024) if sys.platform == "darwin" else kb / 1024


def our_config(s: RealRun) -> Any:
    from grpo_desktop.engine.config import TrainConfig

    return TrainConfig().replace(
        model={
            "name_or_path": s.model,
            "dtype": "float32",
            "device": "cpu",
            "sampling_precision": s.sampling_precision,
        },
        lora={"enabled": True, "r": s.lora_r, "alpha": s.lora_alpha, "dropout": 0.0},
        data={
            "source": "task",
            "task": s.task,
            "task_options": dict(s.task_options),
            "task_size": s.task_size,
            "eval_size": s.eval_size,
            "system_prompt": s.system_prompt,
            "example_problem": s.example_problem,
            "example_answer": s.example_answer,
            "answer_prefix": s.answer_prefix,
        },
        rewards={
            "accuracy_weight": s.accuracy_weight,
            "format_weight": s.format_weight,
            "format_credit": s.format_credit,
        },
        algorithm={
            "num_generations": s.G,
            "prompts_per_step": s.B,
            "max_completion_length": s.max_completion_length,
            "temperature": s.temperature,
            "top_p": 1.0,
            "learning_rate": s.learning_rate,
            "lr_scheduler": "constant",
            "beta": s.beta,
            "loss_type": s.loss_type,
            "scale_rewards": "group",
            "std_type": "sample",  # as TRL
            "num_iterations": 1,
        },
        run={
            "max_steps": s.steps,
            "seed": s.seed,
            "eval_every": s.eval_every,
            "checkpoint_every": 1_000_000,
            "checkpoint_minutes": 0.0,
        },
    )


PHASES = ("time/generate", "time/rewards", "time/ref", "time/update", "time/optimizer")


def _step_row(step: int, metrics: dict, seconds: float) -> dict:
    return {
        "phases": {k.split("/")[1]: metrics[k] for k in PHASES if k in metrics},
        "micro_batch_rows": metrics.get("micro_batch_rows"),
        "step": step,
        "reward": metrics.get("reward"),
        "accuracy_reward": metrics.get("rewards/accuracy/mean"),
        "format_reward": metrics.get("rewards/format/mean"),
        "mean_length": metrics.get("completions/mean_length"),
        "seconds": seconds,
    }


def progress(side: str, text: str) -> None:
    """A progress line on stderr (the bench passes it through while the worker runs)."""
    print(f"  [{side} {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _step_progress(side: str, row: dict) -> None:
    def num(key: str) -> str:
        v = row.get(key)
        return f"{v:.2f}" if isinstance(v, (int, float)) else "-"

    progress(
        side,
        f"step {row['step']}: reward {num('reward')} (accuracy {num('accuracy_reward')}, "
        f"format {num('format_reward')}), {num('mean_length')} tokens, {num('seconds')} s",
    )


def _eval_row(ev: Any, train_seconds: float, eval_seconds: float, side: str = "") -> dict:
    if side:
        progress(
            side,
            f"step {ev.step}: held-out accuracy {ev.accuracy:.1%}, format rate "
            f"{ev.format_rate:.1%}, {ev.mean_length:.1f} tokens ({train_seconds:.0f} s training)",
        )
    return {
        "step": ev.step,
        "accuracy": ev.accuracy,
        "format_rate": ev.format_rate,
        "mean_length": ev.mean_length,
        "n": ev.n,
        "train_seconds": train_seconds,
        "eval_seconds": eval_seconds,
        "samples": [s["completion"][:160] for s in ev.samples[:2]],
    }


def run_ours(s: RealRun) -> dict[str, Any]:
    import torch

    from grpo_desktop.engine.control import TrainControl
    from grpo_desktop.engine.events import EvalResult, RunFinished, RunStarted, StepMetrics
    from grpo_desktop.engine.grpo.trainer import train

    if s.threads > 0:
        torch.set_num_threads(s.threads)
    cfg = our_config(s)
    evals: list[dict] = []
    steps: list[dict] = []
    started = None
    train_seconds = eval_seconds = 0.0
    step_start = 0.0
    if True:
        last = time.perf_counter()
        for event in train(cfg, TrainControl()):
            now = time.perf_counter()
            dt, last = now - last, now
            if isinstance(event, RunStarted):
                started = now
                step_start = train_seconds
                continue
            if started is None:
                continue  # loading and importing the model: not training
            if isinstance(event, EvalResult):
                eval_seconds += dt
                evals.append(_eval_row(event, train_seconds, dt, "ours"))
                step_start = train_seconds
                continue
            train_seconds += dt
            if isinstance(event, StepMetrics):
                steps.append(_step_row(event.step, event.metrics, train_seconds - step_start))
                _step_progress("ours", steps[-1])
                step_start = train_seconds
            elif isinstance(event, RunFinished) and event.status != "completed":
                raise RuntimeError(f"our run ended {event.status}: {event.message}\n{event.error}")
    return {
        "side": "ours",
        "evals": evals,
        "steps": steps,
        "train_seconds": train_seconds,
        "eval_seconds": eval_seconds,
        "peak_rss_mb": peak_rss_mb(),
        "threads": torch.get_num_threads(),
    }


class _TrlPolicy:
    """What `evaluate` reads of a policy: TRL's model, its tokenizer and device."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device


def run_trl(s: RealRun) -> dict[str, Any]:
    import tempfile

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_desktop.engine.data.dataset import load_data, prompt_for
    from grpo_desktop.engine.grpo.evaluate import evaluate
    from grpo_desktop.engine.rewards.functions import format_reward
    from grpo_desktop.engine.rewards.task_score import accuracy_verdicts_for
    from grpo_desktop.engine.sampling.rollout import added_bos, prompt_token_ids

    if s.threads > 0:
        torch.set_num_threads(s.threads)
    cfg = our_config(s)
    data = load_data(cfg.data, seed=s.seed)
    tokenizer = AutoTokenizer.from_pretrained(s.folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(s.folder, dtype=torch.float32)
    system = [{"role": "system", "content": s.system_prompt}] if s.system_prompt else []
    if s.example_problem:
        system += [
            {"role": "user", "content": s.example_problem},
            {"role": "assistant", "content": s.example_answer},
        ]
    bos = tokenizer.bos_token if added_bos(tokenizer) is not None else None

    def prompt(problem: str) -> Any:
        if not s.answer_prefix:
            return [*system, {"role": "user", "content": problem}]
        # TRL 1.16 opens a new assistant turn after a conversational prompt, so a prefix goes
        # in a text prompt rendered as the app renders it (as the exported train.py does).
        text = prompt_for(tokenizer, problem, cfg.data)
        return text[len(bos) :] if bos and text.startswith(bos) else text

    rows = [
        {"prompt": prompt(ex.problem), "answer": ex.answer, "problem": ex.problem}
        for ex in data.train
    ]
    r = cfg.rewards

    def answers(completions: list) -> list[str]:
        """The answers as the app scores them: the prefix, then the completion."""
        texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
        return [s.answer_prefix + text for text in texts]

    def accuracy(completions, answer, problem, **kwargs):
        texts = answers(completions)
        return [v.score for v in accuracy_verdicts_for(cfg.data, r, problem, texts, answer)]

    def fmt(completions, **kwargs):
        texts = answers(completions)
        return format_reward(
            texts, think_tag=r.think_tag, answer_tag=r.answer_tag, credit=r.format_credit
        )

    evals: list[dict] = []
    steps: list[dict] = []
    clock = {"train": 0.0, "eval": 0.0, "last": 0.0}

    def run_eval(trainer_model: Any, step: int) -> None:
        t0 = time.perf_counter()
        clock["train"] += t0 - clock["last"]
        was_training = trainer_model.training
        trainer_model.eval()
        ev = evaluate(_TrlPolicy(trainer_model, tokenizer), data.eval, cfg, step=step)
        if was_training:
            trainer_model.train()
        dt = time.perf_counter() - t0
        clock["eval"] += dt
        evals.append(_eval_row(ev, clock["train"], dt, "trl"))
        clock["last"] = time.perf_counter()

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            clock["last"] = time.perf_counter()
            run_eval(model, 0)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                now = time.perf_counter()
                seconds = clock["train"] + now - clock["last"]
                done = sum(row["seconds"] for row in steps)
                steps.append(
                    {
                        "step": state.global_step,
                        "reward": logs.get("reward"),
                        "accuracy_reward": logs.get("rewards/accuracy/mean"),
                        "format_reward": logs.get("rewards/fmt/mean"),
                        "mean_length": logs.get("completions/mean_length"),
                        "seconds": seconds - done,
                    }
                )
                _step_progress("trl", steps[-1])

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % s.eval_every == 0 or state.global_step == s.steps:
                run_eval(model, state.global_step)

    args = GRPOConfig(
        output_dir="",
        per_device_train_batch_size=s.B * s.G,
        num_generations=s.G,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=s.max_completion_length,
        temperature=s.temperature,
        top_p=1.0,
        top_k=0,
        beta=s.beta,
        use_bias_correction_kl=False,
        loss_type=s.loss_type,
        scale_rewards="group",
        reward_weights=[s.accuracy_weight, s.format_weight],
        learning_rate=s.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=s.steps,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
        seed=s.seed,
    )
    peft = LoraConfig(
        r=s.lora_r,
        lora_alpha=s.lora_alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    with tempfile.TemporaryDirectory(prefix="grpo-real-trl-") as out:
        args.output_dir = out
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[accuracy, fmt],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=peft,
            callbacks=[Clock()],
        )
        sample = [row["prompt"] for row in rows[:8]]
        theirs = [list(ids) for ids in trainer._tokenize_prompts(sample)[0]]
        ours = prompt_token_ids(
            tokenizer, [prompt_for(tokenizer, ex.problem, cfg.data) for ex in data.train[:8]]
        )
        trainer.train()
    return {
        "side": "trl",
        "prompts_match": theirs == ours,
        "evals": evals,
        "steps": steps,
        "train_seconds": clock["train"],
        "eval_seconds": clock["eval"],
        "peak_rss_mb": peak_rss_mb(),
        "threads": torch.get_num_threads(),
    }


def run_worker(side: str, config: str) -> dict[str, Any]:
    s = RealRun.from_json(config)
    return run_ours(s) if side == "ours" else run_trl(s)
