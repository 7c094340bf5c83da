"""Held-out evaluation on the CPU decodes up to EVAL_BATCH_CPU problems in one batch
(engine/grpo/evaluate.py, issue 28): the demo's 100 problems in one decode instead of 64 + 36,
with the same answers and accuracy as batches of 64."""

from __future__ import annotations

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data.dataset import load_data
from grpo_desktop.engine.grpo import evaluate as ev
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.sampling import rollout


def test_cpu_evaluation_answers_70_problems_in_one_batch_as_64_plus_6(monkeypatch):
    cfg = demo_config()
    policy = load_policy(cfg)
    assert policy.device.type == "cpu"
    examples = load_data(cfg.data, seed=cfg.run.seed).eval[:70]
    batches = []
    real = rollout.generate_completions

    def counted(model, tokenizer, ids, *args, **kwargs):
        batches.append(ids.size(0))
        return real(model, tokenizer, ids, *args, **kwargs)

    monkeypatch.setattr(ev, "generate_completions", counted)
    one = ev.evaluate(policy, examples, cfg, step=0, n_samples=70)
    assert batches == [70]
    monkeypatch.setattr(ev, "EVAL_BATCH_CPU", 64)
    two = ev.evaluate(policy, examples, cfg, step=0, n_samples=70)
    assert batches == [70, 64, 6]
    assert [s["completion"] for s in one.samples] == [s["completion"] for s in two.samples]
    assert (one.accuracy, one.format_rate) == (two.accuracy, two.format_rate)
    assert 0.2 < one.accuracy < 0.8  # the untrained demo model: about half right
