"""The worked example's check: does its answer earn the format reward in full?

A worked example (data.example_problem / data.example_answer) is shown to the model before every
problem, and small models copy it: an example whose answer misses a tag, or writes text after
</answer>, teaches the model exactly that flaw, and the format reward then punishes what the
example showed. `example_warnings` scores the example's answer with the run's own format reward
(its tag names and credit) and says so when it falls short of 1.0. It lives here, not in
engine.config's `warnings`, because config sits below rewards (engine/README.md); the trainer and
the window add these warnings to config's. Torch-free.

Try it:  python -c "from grpo_desktop.engine.config import TrainConfig; \\
from grpo_desktop.engine.rewards.worked_example import example_warnings as w; \\
print(w(TrainConfig().replace(data={'example_problem': '2+2?', 'example_answer': '4'})))"
"""

from __future__ import annotations

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.rewards.functions import format_reward


def example_warnings(cfg: TrainConfig) -> list[str]:
    """A warning when the format reward counts and the worked example's answer would not earn
    it in full; empty otherwise (no example, format weight 0, or a perfectly formatted answer)."""
    d, r = cfg.data, cfg.rewards
    answer = d.example_answer.strip()
    if not answer or not d.example_problem.strip() or r.format_weight <= 0:
        return []
    think, tag = r.think_tag.strip() or "think", r.answer_tag.strip() or "answer"
    score = format_reward([answer], think_tag=think, answer_tag=tag, credit=r.format_credit)[0]
    if score >= 1.0:
        return []
    return [
        f"The worked example's answer scores {score:.2f} of 1 under the format reward: the model "
        f"copies the example, so it learns a format the reward does not pay for. Write it as "
        f"<{think}>your reasoning</{think}> <{tag}>the result</{tag}>, with nothing after "
        f"</{tag}>."
    ]
