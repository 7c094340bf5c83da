"""A real TRL `GRPOTrainer` run on a tiny local model, with completion logging: the TRL output
folder the app's Open Run Folder reads (tests/session/test_trl_run.py).

    python tests/support/trl_tiny_run.py OUT [--steps 3] [--save-steps 2] [--states-only]
                                     [--reward-delay SECONDS]

Writes OUT/ as TRL does (checkpoint-N/trainer_state.json every --save-steps, completions/
completions_NNNNN.parquet every step, and at the end the model and a top-level
trainer_state.json) for a randomly initialised ~20k-parameter model built locally
(engine/models/tiny.py, "micro"), conversational prompts with a system prompt (so TRL's parquet holds
message lists, as the exported projects' runs do), groups of 3 and two reward functions, one of
which cannot score some answers (None). CPU only, no download; about 12 s on an idle core.
--states-only keeps only what the app reads (the trainer_state.json files, the completions and
the top-level config.json) and a README saying so: that is tests/fixtures/trl_run.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

KEPT = ("trainer_state.json", "config.json")
FIXTURE_README = """\
# A real TRL run, reduced to what GRPO Desktop reads

Made by `python tests/support/trl_tiny_run.py tests/fixtures/trl_run --states-only` with TRL {trl}:
a real `GRPOTrainer` run of {steps} steps (checkpoints every {save} steps, completion logging
on) on a randomly initialised tiny model built locally. Everything but the trainer_state.json
files, the completions parquet files and the top-level config.json was deleted afterwards
(weights, optimizer, tokenizer, and TRL's model card, which this file replaces). Used by
tests/session/test_trl_run.py; regenerate it with the command above.
"""


REWARD_DELAY_S = [0.0]  # --reward-delay: a slow reward, so a test can watch the run being written


def digits(prompts, completions, **_columns):
    """Share of the answer's characters that are digits: a graded score, so groups have spread."""
    time.sleep(REWARD_DELAY_S[0])
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in texts]


def tagged(prompts, completions, **_columns):
    """1 for an answer holding a tag, 0 otherwise, None (cannot score) for an empty answer."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [None if not t.strip() else float("<" in t) for t in texts]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--save-steps", type=int, default=2)
    p.add_argument("--states-only", action="store_true")
    p.add_argument("--reward-delay", type=float, default=0.0, help="seconds per reward call")
    args = p.parse_args()
    REWARD_DELAY_S[0] = args.reward_delay

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from grpo_desktop.engine.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="trl-tiny-model-") as model_dir:
        build_tiny_model(model_dir, size="micro")
        system = {"role": "system", "content": "Answer with a number."}
        prompts = [[system, {"role": "user", "content": f"What is {i}+{i}?"}] for i in range(12)]
        data = Dataset.from_dict({"prompt": prompts, "answer": [str(2 * i) for i in range(12)]})
        config = GRPOConfig(
            output_dir=args.out,
            max_steps=args.steps,
            per_device_train_batch_size=6,
            num_generations=3,
            max_completion_length=8,
            logging_steps=1,
            log_completions=True,
            save_strategy="steps",
            save_steps=args.save_steps,
            report_to=[],
            use_cpu=True,
            seed=0,
            learning_rate=1e-3,
            beta=0.04,
            disable_tqdm=True,
            bf16=False,
        )
        trainer = GRPOTrainer(
            model=model_dir, reward_funcs=[digits, tagged], args=config, train_dataset=data
        )
        trainer.train()
        trainer.save_model(args.out)
        trainer.save_state()
    if args.states_only:
        import trl

        for path in glob.glob(os.path.join(args.out, "**", "*"), recursive=True):
            top = os.path.dirname(path) == args.out.rstrip("/")
            keep = os.path.basename(path) == KEPT[0] or (top and os.path.basename(path) == KEPT[1])
            if os.path.isfile(path) and not keep and not path.endswith(".parquet"):
                os.remove(path)
        with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8") as fh:
            fh.write(
                FIXTURE_README.format(trl=trl.__version__, steps=args.steps, save=args.save_steps)
            )


if __name__ == "__main__":
    main()
