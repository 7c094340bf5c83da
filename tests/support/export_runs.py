"""Real runs for the export tests (test_export.py, test_ui_export.py, test_export_shapes.py): a
one-step demo run with small settings (LoRA or full), and random lora_B values written into a
checkpoint's adapter (one step may leave them at zero, and then a merge changes nothing). Not a
test module (no test_ prefix).
"""

from __future__ import annotations

import os

import torch

from grpo_desktop.engine.runs.layout import list_checkpoints


def small_demo(lora: bool):
    from grpo_desktop.engine.config.demo import demo_config

    return demo_config().replace(
        lora={"enabled": lora, "r": 4, "alpha": 8},
        algorithm={"num_generations": 2, "prompts_per_step": 2, "max_completion_length": 8},
        data={"eval_size": 0},
        run={"max_steps": 1, "checkpoint_every": 1, "eval_every": 0},
    )


def perturb_lora_b(run_dir: str, std: float = 0.05) -> None:
    """Random lora_B values in the newest checkpoint's adapter (seeded)."""
    from safetensors.torch import load_file, save_file

    path = os.path.join(list_checkpoints(run_dir)[-1][1], "adapter", "adapter_model.safetensors")
    tensors = load_file(path)
    g = torch.Generator().manual_seed(0)
    tensors = {
        k: (torch.randn(v.shape, generator=g) * std).to(v.dtype) if "lora_B" in k else v
        for k, v in tensors.items()
    }
    save_file(tensors, path, metadata={"format": "pt"})


def train_run(cfg, run_dir: str) -> str:
    from grpo_desktop.engine.grpo.trainer import train

    events = list(train(cfg, run_dir=run_dir))
    assert events[-1].status == "completed", events[-1].message
    return run_dir


PROBLEMS = ["What is 12 * 34?", "What is 57 * 8?", "What is 90 * 21?"]


def greedy(model, tokenizer, system_prompt: str, n: int = 16) -> list[list[int]]:
    """Greedy token ids for each of PROBLEMS, prompted as the run prompts."""
    from grpo_desktop.engine.data.dataset import build_prompt

    out = []
    for problem in PROBLEMS:
        ids = tokenizer(build_prompt(tokenizer, problem, system_prompt), return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(
                **ids, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        out.append(gen[0, ids["input_ids"].shape[1] :].tolist())
    return out


def run_checkpoint_policy(run_dir: str):
    """The run's newest checkpoint as the app loads it (engine.load_policy)."""
    from grpo_desktop.engine.models.loading import load_policy
    from grpo_desktop.engine.runs.checkpoint import weights_path
    from grpo_desktop.engine.runs.files import read_run_config

    cfg = read_run_config(run_dir)
    folder, is_adapter = weights_path(list_checkpoints(run_dir)[-1][1])
    cfg = cfg.replace(algorithm={"beta": 0.0})
    policy = load_policy(cfg, folder if is_adapter else None, None if is_adapter else folder)
    policy.model.eval()
    return policy, cfg
