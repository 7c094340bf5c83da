"""Help's "Start here" pages: how GRPO learns, and your first run, in plain words.

The worked example (the 17 × 24 step) and the signal formula are the GRPO Lab's (docs/grpo.md has
the formulas and their check values; a test recomputes the example's numbers); the markup is
explained in topics.py. Data only, Qt-free.
Try it: Help ▸ GRPO Desktop Help, "How GRPO learns"; tests/ui/help/test_help_topics.py.
"""

from __future__ import annotations

from grpo_desktop.ui.help.entry import Topic

S = "Start here"

GUIDES = [
    Topic(
        "how-grpo-learns",
        "How GRPO learns",
        S,
        """
You have problems whose final answer you can check, but nobody wrote out the working. GRPO
(Group Relative Policy Optimization) trains the model on its own attempts, with your checker as
the only teacher. Every training step repeats three moves:

- **Sample.** For each problem the model writes a whole [[group]] of answers — G of them, working
  included ([[rollout|rollouts]]).
- **Score.** Each answer gets a [[reward]] from your checker: for example 1 when the final number
  is right, plus a small bonus for the expected [[format|format]]. This is a [[verifiable-reward]]: a
  program checks it, no human and no reward model.
- **Nudge.** Each answer gets an [[advantage]]: how much better it scored than the others in its
  group. Every token of an answer with a positive advantage is made a little more likely, every
  token of one with a negative advantage a little less likely.

The group's own average is the [[baseline]] — what you would expect this model to score on this
problem. That is the trick: PPO trains a second network (a critic) to guess the baseline, GRPO
just asks the model several times and compares. So an answer is rewarded for beating its
siblings, not for being right in general.

**A worked example** (the lesson's 17 × 24). The model answers 408 (right), 398, 398 and 418. The
checker scores 1, 0, 0, 0. The mean is 0.25 and the [[std|standard deviation]] 0.433, so 408 gets
(1 − 0.25) ÷ 0.433 = **+1.732** and each wrong answer (0 − 0.25) ÷ 0.433 = **−0.577**. The
advantages add up to zero: training only moves probability between answers the model actually
wrote. After one update (learning rate 0.5) the chance of 408 rises from 25 % to 31.6 %.
[[lab:answer|Try this step in the Lab]].

**Two consequences you will see in the plots.**

- A group whose answers all score the same teaches nothing: every advantage is 0. That happens on
  problems the model always solves and on problems it never solves; only problems in between drive
  learning. See [[no-signal]] and the [[plot-zero]] plot. A problem solved with probability p gives
  a useful group of G answers with probability 1 − p^G − (1 − p)^G: at p = 3 % and G = 4 only
  11.5 % of the time. [[lab:signal|See it in the Lab]].
- The model optimises the checker you wrote, not what you meant. If the format bonus weighs as much
  as being right, writing the tags becomes the cheapest win ([[reward-hacking]]). That is why the
  app measures [[held-out-accuracy]] on problems it never trains on.

Two safety belts keep each step small: the [[kl|KL penalty β]] pulls the model back toward the
[[reference-model]], and [[clipping]] limits how far one batch can move a token's probability when
a batch is reused. Next: [[first-run]].
""",
        ("overview", "introduction", "loop", "algorithm", "grpo"),
    ),
    Topic(
        "first-run",
        "Your first run",
        S,
        """
The app opens on the built-in demo: a tiny 1.6M-parameter model that does arithmetic, already
right about half the time. It needs no GPU and no download.

- **Press Start** (Ctrl+R). Every plot gains a point per step. On two CPU cores 100 steps take
  about two minutes.
- **Watch two plots side by side:** [[plot-reward]] and [[plot-eval]]. In the demo the reward
  climbs from about 0.65 to about 1.0 (at most 1.2: accuracy 1 plus format 0.2) and held-out accuracy from
  about 49 % to 85–92 %. Both rising together is the sign of real learning.
- **Check that steps teach:** [[plot-zero]] should stay well below 1. Near 1 every group scored
  the same and the step did nothing.
- **Check that answers finish:** [[plot-truncated]] should stay near 0. If most answers hit the
  length limit, raise *Max completion tokens*.
- **Look at the answers themselves:** click a point on any plot to open that step in the
  Rollouts tab: every answer with its reward parts and advantage, green (made more likely) or red
  (less likely).

**Your own data.** In the Dataset panel choose a file with a problem column and an answer column
(GSM8K-style `#### 42` answers are understood). Keep some problems held out. In the Reward panel
give accuracy the largest weight (1.0) and format a small one (0.2). Start with a small model and
[[lora]] (or [[qlora]] on a GPU); *Will it fit?* under the panels estimates the memory before you
start.

**Choosing problems.** Pick problems the model solves sometimes: not always, not never. If the
[[no-signal]] alarm says the problems are too hard, use easier ones or a larger [[g|group size G]].

**If an alarm appears**, its banner says what it saw and what to try; *What does this mean?* opens
its entry here. Before you spend hours on a real model, try the failure modes in the
[[lab:reward|reward-design Lab]].
""",
        ("getting started", "start", "demo", "quick start", "tutorial", "beginner"),
    ),
]
