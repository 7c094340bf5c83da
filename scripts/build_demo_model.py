"""Build the built-in demo model: a tiny Llama that multiplies two-digit numbers, imperfectly.

    python scripts/build_demo_model.py          # writes grpo_desktop/resources/demo_model (~25 min)
    python scripts/build_demo_model.py --out /tmp/m --steps 300 --eval-every 100   # a quick look

What it does: builds a 1.6M-parameter Llama (size "demo" in engine/models/tiny.py) with the app's
character-level tokenizer and chat template, and trains it with supervised fine-tuning on worked
answers to the built-in problems of difficulty 2, prompted exactly as the demo prompts them
(`demo_config()`'s system prompt and chat template): every step a one-digit fact or a small sum
with its carry written out, some carries slipped on purpose so GRPO has something to fix (see
`worked_answer`). The problems come from the arithmetic generator's `sft` pool, never used by
GRPO training or held-out evaluation.

Seeded (`--seed`): the same seed, library versions and thread count give the same weights. Writes
the held-out greedy accuracy and format rates it reached to build_info.json. Downloads nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
import warnings
from dataclasses import asdict, dataclass

import torch

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data.arithmetic import arithmetic_problems, pool_size
from grpo_desktop.engine.data.dataset import build_prompt
from grpo_desktop.engine.models.tiny import tiny_model
from grpo_desktop.engine.variants.eval_target import evaluate_target

DEFAULT_OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "grpo_desktop",
    "resources",
    "demo_model",
)
DIFFICULTY = 2


@dataclass(frozen=True)
class Mix:
    """How often the worked answers slip (probabilities per carry, and per answer for the format)."""

    big_carry: int = 2  # multiplication carries from this size up are "big"
    big_carry_slip: float = 0.65  # a big multiplication carry written one too small
    small_carry_slip: float = 0.15  # a smaller multiplication carry written one too small
    sum_carry_slip: float = 0.3  # a carry of the addition dropped
    format_slip: float = 0.15  # no think tags / "The answer is N." / a bare number


def _carry(true: int, rng: random.Random, rate: float) -> int:
    return true - 1 if true > 0 and rng.random() < rate else true


def _times(a: int, digit: int, shift: str, rng: random.Random, mix: Mix) -> tuple[str, int]:
    """'17×4: 7×4=28, 1×4+2=6, so 68.' and its value (a partial product, a carry may slip)."""
    a1, a0 = divmod(a, 10)
    ones = a0 * digit
    true = ones // 10
    rate = mix.big_carry_slip if true >= mix.big_carry else mix.small_carry_slip
    carry = _carry(true, rng, rate)
    high = a1 * digit + carry
    value = int(f"{high * 10 + ones % 10}{shift}")
    text = f"{a}×{digit}{shift}: {a0}×{digit}={ones}, {a1}×{digit}+{carry}={high}, so {value}."
    return text, value


def _plus(p1: int, p2: int, rng: random.Random, mix: Mix) -> tuple[str, int]:
    """'340+68: 4+6=10, 3+0+1=4, so 408.': column by column from the tens (p1 ends in 0, so the
    ones are p2's), each carry written out (and sometimes dropped)."""
    x, y = str(p1)[::-1], str(p2)[::-1]
    steps, digits, carry = [], [], 0
    for i in range(1, len(x)):
        d1, d2 = int(x[i]), int(y[i]) if i < len(y) else 0
        if i == 1:
            z = d1 + d2
            steps.append(f"{d1}+{d2}={z}")
        else:
            carry = _carry(carry, rng, mix.sum_carry_slip)
            z = d1 + d2 + carry
            steps.append(f"{d1}+{d2}+{carry}={z}")
        digits.append(z % 10)
        carry = z // 10
    value = int(f"{z}{''.join(str(d) for d in digits[-2::-1])}{y[0]}")
    return f"{p1}+{p2}: {', '.join(steps)}, so {value}.", value


def worked_answer(a: int, b: int, rng: random.Random, mix: Mix) -> str:
    """One worked answer to a × b, right or slipped as `mix` says.

    A worked answer, in the format the app rewards:

        <think>17×4: 7×4=28, 1×4+2=6, so 68. 17×20: 7×2=14, 1×2+1=3, so 340.
        340+68: 4+6=10, 3+0+1=4, so 408.</think><answer>408</answer>

    (one line in the data). Every step is a one-digit fact or a small sum with its carry written out:
    a model this small learns that in minutes, while the compact "17×24 = 340 + 68 = 408" — every
    partial product and carry worked out in one token — was still below 10 % after 400 steps of 64.

    The problems come from the arithmetic generator's `sft` pool, which GRPO training (`train` pool)
    and every held-out evaluation (`test` pool) never use (see engine/data/arithmetic.py).

    The model is made imperfect on purpose, so that GRPO has something to fix: the lessons' "408 vs
    398". Some worked answers write a multiplication carry one too small (7×4=28, 1×4+1=5, so 58: the
    total comes out 398), more often for big carries (2 or more: 65 %) than small ones (15 %); some
    drop a carry of the addition (30 %: 308); 15 % slip on the format (no think tags, "The answer is
    408." or a bare number). The model learns those rates, so at each carry it puts real probability
    on both digits: greedy decoding takes the slip wherever a big carry occurs (held-out greedy
    accuracy about 40 %), and groups of sampled answers to such a problem hold right and wrong
    answers, whose advantages push the carry back — one token, the same rule on every problem.
    """
    b1, b0 = divmod(b, 10)
    ones_text, p2 = _times(a, b0, "", rng, mix)
    tens_text, p1 = _times(a, b1, "0", rng, mix)
    sum_text, total = _plus(p1, p2, rng, mix)
    think = f"{ones_text} {tens_text} {sum_text}"
    r = rng.random() / max(mix.format_slip, 1e-9)
    if r < 1 / 3:
        return f"{think}<answer>{total}</answer>"
    if r < 2 / 3:
        return f"<think>{think}</think>The answer is {total}."
    if r < 1:
        return f"<think>{think}</think>{total}"
    return f"<think>{think}</think><answer>{total}</answer>"


def _factors(question: str) -> tuple[int, int]:
    a, b = question.removeprefix("What is ").removesuffix("?").split(" × ")
    return int(a), int(b)


class Batcher:
    """SFT batches: the prompt part every example shares (system message and "What is ") once, then
    each example's own tokens, right-padded, with labels only on the completion."""

    def __init__(self, tok, system_prompt: str, problems: list[tuple[int, int]], mix: Mix):
        self.tok, self.problems, self.mix = tok, problems, mix
        self.system_prompt = system_prompt
        first = self._ids(build_prompt(tok, "What is 10 × 10?", system_prompt))
        other = self._ids(build_prompt(tok, "What is 99 × 99?", system_prompt))
        n = next(i for i, (x, y) in enumerate(zip(first, other)) if x != y)
        self.prefix = torch.tensor([first[:n]])  # (1, Lp)

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def sample(self, rng: random.Random, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        Lp = self.prefix.size(1)
        rows, labels = [], []
        for _ in range(size):
            a, b = rng.choice(self.problems)
            prompt = self._ids(build_prompt(self.tok, f"What is {a} × {b}?", self.system_prompt))
            answer = self._ids(worked_answer(a, b, rng, self.mix)) + [self.tok.eos_token_id]
            own = prompt[Lp:]
            rows.append(own + answer)
            labels.append([-100] * len(own) + answer)
        T = max(len(r) for r in rows)
        ids = torch.full((size, T), self.tok.pad_token_id)  # (B, T)
        lab = torch.full((size, T), -100)  # (B, T)
        for i, (r, lb) in enumerate(zip(rows, labels)):
            ids[i, : len(r)], lab[i, : len(lb)] = torch.tensor(r), torch.tensor(lb)
        return ids, lab


def sft_loss(model, prefix: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Token cross-entropy on the completions; the shared prefix runs once and its keys and values
    are repeated for every row (gradients flow back through the copy)."""
    B, T = ids.shape
    Lp = prefix.size(1)
    cache = model(input_ids=prefix, use_cache=True).past_key_values
    cache.batch_repeat_interleave(B)
    positions = torch.arange(Lp, Lp + T).expand(B, T)  # (B, T)
    logits = model(
        input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True
    ).logits  # (B, T, V); right padding needs no mask under causal attention
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(),
        labels[:, 1:].reshape(-1),
        ignore_index=-100,
    )


def quick_check(model, tok, n: int = 100) -> str:
    """Greedy accuracy and format, and format at temperature 1, of the model being trained."""
    from grpo_desktop.engine.grpo.evaluate import evaluate, sampled_format_rate
    from grpo_desktop.engine.models.loading import Policy
    from grpo_desktop.engine.variants.eval_target import held_out_examples

    cfg = demo_config()
    policy = Policy(model, tok, torch.device("cpu"), torch.float32, uses_lora=False)
    examples = held_out_examples(cfg, n, seed=0)
    result = evaluate(policy, examples, cfg, step=0, n_samples=n)
    t1 = sampled_format_rate(policy, examples, cfg)
    model.train()
    parts = steps_right([(s["prompt"], s["completion"]) for s in result.samples])
    return (
        f"accuracy {result.accuracy:.2f} format {result.format_rate:.2f} format@T1 {t1:.2f} "
        + " ".join(f"{k} {v:.2f}" for k, v in parts.items())
    )


_TIMES = re.compile(r"(\d+)×(\d+): (\d)×(\d)=(\d+), (\d)×(\d)\+(\d)=(\d+), so (\d+)\.")
_PLUS = re.compile(r"(\d+)\+(\d+): ([\d+=, ]+), so (\d+)\.")


def steps_right(pairs: list[tuple[str, str]]) -> dict[str, float]:
    """How the worked answers went, step by step: `facts` share of multiplication steps computed
    right from what is written, `carries` share of multiplication carries copied right (the
    slips), `sums` share of additions whose columns and result are right from what is written."""
    n = {"facts": [0, 0], "carries": [0, 0], "sums": [0, 0]}
    for _question, completion in pairs:
        for m in _TIMES.finditer(completion):
            a0, d, ones, a1, d2, carry, high, value = (int(g) for g in m.groups()[2:])
            shift = "0" if m.group(2).endswith("0") and len(m.group(2)) > 1 else ""
            right = ones == a0 * d and high == a1 * d2 + carry
            right = right and str(value) == f"{high * 10 + ones % 10}{shift}"
            n["facts"][0] += right
            n["facts"][1] += 1
            n["carries"][0] += carry == ones // 10
            n["carries"][1] += 1
        for m in _PLUS.finditer(completion):
            n["sums"][0] += int(m.group(4)) == int(m.group(1)) + int(m.group(2))
            n["sums"][1] += 1
    return {k: v[0] / max(v[1], 1) for k, v in n.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help="folder for the weights and tokenizer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1200, help="optimizer steps")
    p.add_argument("--batch", type=int, default=32, help="worked answers per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--size", default="demo", help="a model size of engine/models/tiny.py")
    p.add_argument(
        "--mix", default="{}", help='JSON overriding Mix fields, e.g. {"format_slip": 0.1}'
    )
    p.add_argument("--eval-n", type=int, default=200, help="held-out problems for the final check")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the same weights on any machine, and no slowdown when "
        "other jobs share the cores)",
    )
    p.add_argument(
        "--eval-every", type=int, default=0, help="steps between quick held-out checks (0: none)"
    )
    args = p.parse_args(argv)

    mix = Mix(**json.loads(args.mix))
    # The shared-prefix pass hands its cache over as past_key_values, which transformers 5 renames.
    warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model, tok = tiny_model(args.size, seed=args.seed)
    sft = arithmetic_problems(pool_size(DIFFICULTY, "sft"), DIFFICULTY, args.seed, pool="sft")
    batcher = Batcher(
        tok, demo_config().data.system_prompt, [_factors(q.question) for q in sft], mix
    )
    params = sum(t.numel() for t in model.parameters())
    print(
        f"{params / 1e6:.2f}M parameters, {len(sft):,} problems, {args.steps} steps of "
        f"{args.batch}, {torch.get_num_threads()} threads",
        file=sys.stderr,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, args.steps // 20)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    model.train()
    t0, smooth = time.time(), None
    for step in range(1, args.steps + 1):
        ids, labels = batcher.sample(rng, args.batch)
        loss = sft_loss(model, batcher.prefix, ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        smooth = loss.item() if smooth is None else 0.95 * smooth + 0.05 * loss.item()
        if step % args.log_every == 0 or step == args.steps:
            print(f"step {step} loss {smooth:.4f} {time.time() - t0:.0f}s", file=sys.stderr)
        if args.eval_every and step % args.eval_every == 0:
            t_eval = time.time()
            print(f"  held-out: {quick_check(model, tok)}", file=sys.stderr)
            t0 += time.time() - t_eval  # the reported time is training time
    train_s = time.time() - t0
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    metrics = evaluate_target(args.out, n=args.eval_n, seed=0)
    info = {
        "seed": args.seed,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "size": args.size,
        "parameters": params,
        "mix": asdict(mix),
        "sft_problems": len(sft),
        "train_seconds": round(train_s, 1),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "held_out": metrics,
    }
    with open(os.path.join(args.out, "build_info.json"), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=2)
        fh.write("\n")
    print(json.dumps(info), file=sys.stderr)
    print(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
