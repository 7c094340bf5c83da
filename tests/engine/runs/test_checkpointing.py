"""Gradient checkpointing on the CPU, with fast_linear's oneDNN routing on and off (kernels.py):
the backward recomputes each checkpointed layer under the routing its forward had, so it runs at
all (torch refuses a recomputation that saves other tensors) and the gradients are those of the
run without checkpointing. LoRA and full fine-tuning, a real backward and a real training step."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.ops import kernels
from grpo_desktop.engine.sampling.rollout import token_logps

pytestmark = pytest.mark.skipif(kernels._op() is None, reason="this torch has no oneDNN linear")


def _policy(model_dir: str, kind: str, checkpointing: bool):
    lora = kind != "full"
    cfg = TrainConfig().replace(
        model={"name_or_path": model_dir, "device": "cpu", "gradient_checkpointing": checkpointing},
        lora={"enabled": lora, "r": 4},
        quantization={"mode": "4bit" if kind == "qlora" else "none"},
        algorithm={"beta": 0.0},
    )
    torch.manual_seed(0)  # the same LoRA A matrices in both runs
    policy = load_policy(cfg)
    if lora:
        for name, p in policy.model.named_parameters():  # B = 0 at init would hide A's gradient
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    checkpointed = any(getattr(m, "gradient_checkpointing", False) for m in policy.model.modules())
    assert checkpointed == checkpointing
    return policy.model.train()


def _backward(model) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Log-probs, parameter gradients and the number of oneDNN products of one forward + backward."""
    calls = []
    op = kernels._state["op"]
    kernels._state["op"] = lambda *args: calls.append(1) or op(*args)
    try:
        g = torch.Generator().manual_seed(0)
        prompt = torch.randint(3, 60, (8, 9), generator=g)  # (8, 9), all different: one plain pass
        completion = torch.randint(3, 60, (8, 10), generator=g)  # (8, 10): 152 rows per product
        ones = torch.ones_like
        logps, _ = token_logps(model, prompt, ones(prompt), completion, ones(completion))  # (8, 10)
        logps.sum().backward()
    finally:
        kernels._state["op"] = op
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach(), grads, len(calls)


@pytest.mark.parametrize("onednn", ["1", "0"])
@pytest.mark.parametrize("kind", ["lora", "full", "qlora"])
def test_checkpointed_backward_gives_the_gradients_of_the_plain_one(
    choose_linear, tiny_model_dir, kind, onednn
):
    choose_linear(onednn)
    assert kernels.enabled() == (onednn == "1")
    logps, grads, plain_calls = _backward(_policy(tiny_model_dir, kind, checkpointing=False))
    with warnings.catch_warnings():
        # e.g. torch's "use_reentrant should be passed explicitly" (peft enables it again for QLoRA)
        warnings.filterwarnings("error", message=r"torch\.utils\.checkpoint")
        policy = _policy(tiny_model_dir, kind, checkpointing=True)
        logps_ckpt, grads_ckpt, ckpt_calls = _backward(policy)
    assert torch.allclose(logps_ckpt, logps, rtol=0, atol=1e-6)
    assert grads and grads_ckpt.keys() == grads.keys()
    assert all("lora_" in n for n in grads) if kind != "full" else len(grads) > 10
    for name, want in grads.items():
        scale = float(want.abs().max())
        assert scale > 0, name
        assert float((grads_ckpt[name] - want).abs().max()) <= 1e-6 * scale, name
    if onednn == "1":
        # The recomputation ran its products in oneDNN too: one forward product more per linear.
        assert ckpt_calls > plain_calls > 0
    else:
        assert ckpt_calls == plain_calls == 0


# A random model's answers are all wrong (no spread, no gradient): score distinct characters.
SPREAD = "def check(completion, answer, prompt):\n    return float(len(set(completion)))\n"


def _one_step(model_dir: str, lora: bool, checkpointing: bool) -> dict:
    cfg = TrainConfig().replace(
        model={"name_or_path": model_dir, "device": "cpu", "gradient_checkpointing": checkpointing},
        lora={"enabled": lora},
        data={"eval_size": 0, "arithmetic_size": 50},
        rewards={"accuracy_weight": 0.0, "format_weight": 0.0, "custom_checker": SPREAD},
        algorithm={"num_generations": 4, "prompts_per_step": 2, "max_completion_length": 12},
        run={"max_steps": 1, "eval_every": 0, "checkpoint_every": 100, "seed": 3},
    )
    events = list(train(cfg, TrainControl()))
    assert events[-1].status == "completed", events[-1].message
    (step,) = [e for e in events if e.type == "step"]
    return step.metrics


@pytest.mark.parametrize("lora", [True, False])
def test_a_training_step_with_checkpointing_runs_with_onednn(choose_linear, micro_model_dir, lora):
    choose_linear("1")
    assert kernels.enabled()
    plain = _one_step(micro_model_dir, lora, checkpointing=False)
    ckpt = _one_step(micro_model_dir, lora, checkpointing=True)
    assert math.isfinite(ckpt["grad_norm"]) and ckpt["grad_norm"] > 1e-3
    # Same seed, same samples; the gradient differs only by float rounding (the run without
    # checkpointing shares each group's prompt pass, which checkpointed layers cannot).
    assert ckpt["completions/mean_length"] == plain["completions/mean_length"]
    assert ckpt["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)
    assert ckpt["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-7)
