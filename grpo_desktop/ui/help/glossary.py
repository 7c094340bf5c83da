"""Help's glossary: the words of GRPO and of this app, each in a few plain sentences with links
to the related entries. The algorithm's terms say what the engine does (docs/grpo.md has the
formulas); the markup is explained in topics.py. Data only, Qt-free.
Try it: `python -m grpo_desktop.ui.help.topics advantage`.
"""

from __future__ import annotations

from grpo_desktop.ui.help.entry import Topic

S = "Glossary"


def _term(anchor: str, title: str, body: str, *keywords: str) -> Topic:
    return Topic(anchor, title, S, body, keywords)


GLOSSARY = [
    _term(
        "group",
        "Group",
        """
The G answers the model writes to the same problem in one step. GRPO compares the answers of a
group with each other: the group's mean reward is the [[baseline]] and each answer's
[[advantage]] is how far it scored above or below it. Groups never compare with other problems'
groups, so an easy problem and a hard one are each judged on their own terms.
""",
        "siblings",
    ),
    _term(
        "g",
        "Group size G",
        """
How many answers are sampled per problem (*Group size G*). Larger groups find a rare right answer
more often — at p = 3 % a group of 4 has a useful mix 11.5 % of the time, a group of 16 38.6 % —
but each step generates more text. Typical values are 4 to 16. Each step generates B × G answers
(B = *Prompts per step*). G must be at least 2: a group of one has nothing to compare with.
[[lab:signal|See the chances in the Lab]].
""",
        "group size",
        "num_generations",
    ),
    _term(
        "rollout",
        "Rollout (completion)",
        """
One answer the model wrote to a problem during training, working included: a sample from the
model at the chosen [[temperature]]. Also called a completion or a generation. The Rollouts tab
lists every rollout with its [[reward-parts|reward parts]], its reward and its [[advantage]].
""",
        "completion",
        "generation",
        "sample",
    ),
    _term(
        "reward",
        "Reward",
        """
The score an answer gets: the weighted sum of its [[reward-parts|reward parts]], for example
1.0 × accuracy + 0.2 × format. Only differences between answers of the same [[group]] matter to
GRPO: adding 5 to every reward changes nothing. When a part could not score an answer (None:
your checker failed, or there is no reference answer) the sum is unknown, not counted as 0: the
answer gets no [[advantage]] and stays out of its group's mean and spread.
""",
        "score",
    ),
    _term(
        "reward-parts",
        "Reward parts",
        """
The separate checks that make up the [[reward]], each with a weight in the Reward panel:
**accuracy** (is the final answer right? 1 or 0), **format** (are the reasoning and the answer in
the expected tags? 1 or 0, see [[format]]) and optionally your own **custom checker**. The
[[plot-reward]] plot draws each part unweighted. Keep accuracy the heaviest: when format weighs as
much, writing the tags becomes the cheapest win ([[reward-hacking]]).
""",
        "accuracy reward",
        "format reward",
        "weights",
        "custom checker",
    ),
    _term(
        "format",
        "Format reward",
        """
A small bonus (1 or 0, before its weight) for answers that put the reasoning in `<think>…</think>` and
the final answer in `<answer>…</answer>`. It teaches a readable structure that the accuracy
checker can find; it says nothing about being right. Weight it well below accuracy (0.2 against
1.0). *Format credit* decides how it is counted: all-or-nothing (the default) or
[[format-credit|per tag]].
""",
        "tags",
        "think",
    ),
    _term(
        "format-credit",
        "Format credit: all-or-nothing or per tag",
        """
How the [[format]] reward counts. **all**: 1 only for the whole `<think>…</think><answer>…</answer>`
format, 0 for anything else. **per tag**: a quarter for each tag in its place — `<think>` opening
the answer, `</think>` once, `<answer>` once right after it, `</answer>` once closing a non-empty
answer at the end; a tag written twice earns nothing, and text before, between or after the
blocks costs the quarter beside it. The full format scores 1 either way.

Why it matters: a real pretrained model asked for the tags often never writes all four. Under
all-or-nothing every answer then scores 0, the format part has no spread in any [[group]], every
format [[advantage]] is 0, and the format is never learned (the [[alarm-format_flat]] alarm says
so). Per tag, the answers that wrote more tags beat their siblings from the first step, so the
model can climb to the format one tag at a time. [[lab:reward|See it in the Lab]] (the built-in
group *A small model's first answers*).
""",
        "partial credit",
        "per tag",
        "format_credit",
    ),
    _term(
        "verifiable-reward",
        "Verifiable reward (RLVR)",
        """
A reward computed by a program that checks the result — an exact final number, a test suite, a
format rule — instead of by people or a learned reward model. Training a model on its own
attempts with such a checker as the only feedback is reinforcement learning from verifiable
rewards (RLVR). It needs no worked solutions, only the final answers. The model optimises the
checker you wrote, gaps included ([[reward-hacking]]).
""",
        "rlvr",
        "checker",
        "verifier",
    ),
    _term(
        "advantage",
        "Advantage",
        """
How much better one answer scored than the other answers in its [[group]]: its reward minus the
group's mean, divided by the group's [[std|standard deviation]] (A = (r − mean) ÷ (std + 0.0001)). Positive: every
token of the answer is made more likely. Negative: less likely. Zero: the answer is left alone.

**Example.** Rewards 1, 0, 0, 0: mean 0.25, std 0.433, so the right answer gets +1.732 and each
wrong one −0.577. Rewards 1, 0, 0, 1: +1 and −1. The advantages of a group always add up to 0:
one answer can only gain probability that others lose.

Why not simply push up every right answer? On a problem the model already solves 95 % of the
time, that would mostly push up answers that are already likely. A lucky success on a hard problem
tells far more, and the advantage gives it far more weight. See the [[plot-hist]] plot and
[[advantage-scaling]]. [[lab:answer|Try one step by hand in the Lab]].
""",
        "advantages",
        "normalised reward",
    ),
    _term(
        "baseline",
        "Baseline (group mean)",
        """
The reward you would expect from this model on this problem, against which an answer is judged.
PPO trains a second network, a critic about as large as the model, to predict it. GRPO uses the
mean reward of the [[group]] instead: no critic, about half the memory. An answer above the
baseline gets a positive [[advantage]], one below it a negative one.
""",
        "group mean",
        "critic",
        "value model",
        "ppo",
    ),
    _term(
        "std",
        "Standard deviation and scaling",
        """
The spread of a group's rewards. GRPO divides each answer's reward minus the mean by it, which
puts every problem on the same scale: a single success on a hard problem (1 of 4 right) gets +1.73,
a single failure on an easy one (3 of 4 right) −1.73. *Standard deviation* chooses population (÷ G, as the
lessons and DeepSeekMath) or sample (÷ (G − 1), as TRL): with rewards 1, 0, 0, 0 that gives
+1.732 or +1.500. When the std is 0 every answer scored the same: [[no-signal]].
""",
        "standard deviation",
        "population",
        "sample std",
    ),
    _term(
        "advantage-scaling",
        "Advantage scaling",
        """
What the reward minus the group mean is divided by (*Advantage scaling*): **group** — the
group's own [[std|standard deviation]] (GRPO); **batch** — one std over the whole step; **none** — nothing, so
advantages keep the reward's units (as [[dr-grpo]] does). Scaling by the group std makes
rare successes count more but also magnifies tiny differences, such as a format bonus in a
group where every answer is wrong.
""",
        "scale",
        "normalisation",
    ),
    _term(
        "no-signal",
        "No signal",
        """
A group whose answers all got the same reward has std 0, so every [[advantage]] is 0 and the
group changes nothing. It happens on problems the model always solves (all right) and on problems
it never solves (all wrong): only problems in between drive learning. If the model solves a
problem with probability p, a group of G has both a right and a wrong answer with probability
1 − p^G − (1 − p)^G — at p = 3 % and G = 4 only 11.5 %, at p = 70 % and G = 8 94.2 %.

The [[plot-zero]] plot shows the share of such groups per step; the [[alarm-no_signal]] alarm
fires when it stays high. Fixes: problems at the edge of the model's ability, a larger
[[g|G]], a higher [[temperature]], *Dynamic sampling*. [[lab:signal|See which groups teach]].
""",
        "zero std",
        "groups that teach nothing",
        "frac_reward_zero_std",
        "same score",
        "all right",
        "all wrong",
    ),
    _term(
        "kl",
        "KL and β",
        """
KL divergence measures how far the model's token probabilities have moved from the
[[reference-model]]'s. With *KL penalty β* above 0 the loss adds β × KL for every token (the k3
estimate, exp(ref − logp) − (ref − logp) − 1, which is never negative), pulling the model back
toward where it started: a leash. Higher β is safer but slower; β = 0 drops the penalty and the
reference model's forward pass (DAPO and many reasoning recipes do). The [[plot-kl]] plot shows
it. A KL penalty slows [[reward-hacking]]; it does not prevent it.
""",
        "beta",
        "kl divergence",
        "penalty",
        "leash",
    ),
    _term(
        "reference-model",
        "Reference model",
        """
The model as it was when training started, which [[kl|KL]] is measured against. With [[lora]] it
costs no extra memory: it is the same model with the adapter switched off. With β = 0 it is not
used at all.
""",
        "ref",
        "reference policy",
    ),
    _term(
        "clipping",
        "Ratio clipping (ε)",
        """
From PPO. When a batch of answers is used for several updates (*Updates per batch* above 1), the
ratio between a token's new and old probability is clipped to [1 − ε, 1 + ε] (*Clip ε low* and
*high*, 0.2 by default; DAPO's clip-higher uses 0.28 above), so one batch cannot move the model
too far. With one update per batch the ratio is exactly 1 and clipping never applies. Not the
same as [[gradient-clipping]].
""",
        "epsilon",
        "ppo clip",
        "ratio",
    ),
    _term(
        "gradient-clipping",
        "Gradient clipping",
        """
Before each optimizer step, a gradient whose norm is larger than *Gradient clipping* (1.0 by
default) is scaled down to it, so a rare huge update cannot wreck the model. The
[[plot-grad_norm]] plot shows the norm before clipping.
""",
        "max_grad_norm",
        "grad norm",
    ),
    _term(
        "entropy",
        "Entropy",
        """
How uncertain the model is about its next token, averaged over the answers' tokens: high when many
tokens are plausible, near 0 when it is sure. GRPO needs answers in a group to differ, so it needs
some entropy. A slow fall is normal; a collapse means answers become identical and learning stops
(the [[alarm-entropy_collapse|alarm]], the [[plot-entropy|plot]]).
""",
        "exploration",
        "uncertainty",
    ),
    _term(
        "temperature",
        "Temperature",
        """
How random sampling is (*Temperature*, 1.0 = the model's own probabilities). GRPO needs variety
inside a group: too low and all answers of a group are the same ([[no-signal]]), too high and
they become noise. The loss uses the same temperature as sampling.
""",
        "sampling",
        "top-p",
    ),
    _term(
        "loss",
        "Loss and its aggregation",
        """
What the update minimises: for every token, minus its answer's [[advantage]] times the
probability ratio (with [[clipping]]), plus β × KL. *Loss aggregation* chooses how token losses
are averaged: **grpo** — the mean over each answer's tokens, then over answers (has the
[[length-bias]]); **bnpo** — the mean over all tokens of a micro-batch; **dr_grpo** — the sum
divided by answers × *Max completion tokens* ([[dr-grpo]]); **dapo** — the sum divided by all
the step's answer tokens. The [[plot-loss]] plot hovers near 0 by design.
""",
        "objective",
        "aggregation",
        "loss_type",
        "bnpo",
        "dapo",
    ),
    _term(
        "length-bias",
        "Length bias",
        """
With the original grpo loss each answer's token losses are averaged over its length, so each
token of answer i carries A ÷ length. A long wrong answer spreads its penalty thinly: it is
punished less per token than a short wrong one, and answers drift longer without getting better.
The flip side: a short right answer gets a bigger push per token than a long right one. Watch
the [[plot-length|Length plot]] against [[plot-eval|held-out accuracy]]; the [[alarm-length_drift]] alarm fires when length moves by
half. [[dr-grpo]] removes it. [[lab:reward|See the per-token push in the Lab]].
""",
        "length normalisation",
        "verbose",
        "longer answers",
    ),
    _term(
        "dr-grpo",
        "Dr. GRPO",
        """
A 2025 fix ("Understanding R1-Zero-Like Training") for two biases of GRPO: it drops the
per-answer length normalisation (each token's loss is divided by a constant, answers ×
*Max completion tokens*, see [[length-bias]]) and the division by the group [[std|standard deviation]]
(*Advantage scaling* none). Pick the Dr. GRPO preset in the Hyperparameters panel.
""",
        "dr_grpo",
        "preset",
    ),
    _term(
        "truncation",
        "Truncation",
        """
An answer that reaches *Max completion tokens* is cut off there. It usually has no final answer,
so it scores 0 however good its reasoning, and the model never sees how a good answer ends. A few
are normal; when most answers are cut off the run learns almost nothing (the [[plot-truncated|Truncated plot]],
the [[alarm-truncation|Answers cut off alarm]]). *Mask truncated* leaves them out of the loss instead.
""",
        "cut off",
        "clipped",
        "max completion length",
    ),
    _term(
        "held-out-accuracy",
        "Held-out accuracy",
        """
The share of problems the model gets right among problems it never trains on (*Held-out
problems*), answered greedily and checked every few steps (*Evaluate every*). It is the side
evaluation the reward cannot game: training reward measures what you reward, held-out accuracy
what you want. 100 problems wobble by about 5 points. See the [[plot-eval|Held-out accuracy plot]].
""",
        "eval",
        "evaluation",
        "side evaluation",
        "test set",
    ),
    _term(
        "reward-hacking",
        "Reward hacking",
        """
The model raises its reward without getting better at the task, by exploiting what the checker
pays for: writing the tags without the right number, hedging ("398 or 408") past a lenient
checker. Sign: [[plot-reward]] up while [[plot-eval]] is flat or down. Prevention: accuracy
weighted far above format, a strict checker, and a held-out set you trust over the reward
(the [[alarm-reward_hacking|reward-hacking alarm]]). [[lab:answer|Watch a hedge take over in the Lab]] (the sloppy checker,
a weaker starting model).
""",
        "hack",
        "gaming",
        "hedge",
    ),
    _term(
        "lora",
        "LoRA",
        """
Instead of changing all the model's weights, LoRA trains small extra matrices (an adapter of rank
*LoRA rank*) added to some layers. Far less memory for gradients and optimizer state, and the
[[reference-model]] is free: the same model with the adapter off. Usually needs a higher learning
rate than full fine-tuning.
""",
        "adapter",
        "peft",
        "rank",
    ),
    _term(
        "qlora",
        "QLoRA (4-bit)",
        """
[[lora]] on a model whose frozen weights are stored in 4 bits (NF4) instead of 16, about a quarter
of the memory, so a larger model fits a smaller GPU. Needs a CUDA GPU (bitsandbytes); slightly
slower per step. Set *Quantization* to 4-bit in the Model panel.
""",
        "4-bit",
        "quantization",
        "nf4",
        "bitsandbytes",
    ),
    _term(
        "micro-batch",
        "Micro-batch",
        """
The step's B × G answers do not have to pass through the model at once: the update runs them in
micro-batches and adds up the gradients, which gives the same result with less memory.
*Micro-batch size* 0 (auto) picks the largest that fits and halves it by itself if memory runs
out.
""",
        "gradient accumulation",
        "memory",
    ),
    _term(
        "health-alarms",
        "Health alarms",
        """
While training, the app watches the metrics and raises an alarm once per run when something looks
wrong: the message line above the plots says what it saw and what to try, a dashed marker on the plots at
that step, a log line. The kinds: [[alarm-reward_hacking]], [[alarm-no_signal]],
[[alarm-format_flat]], [[alarm-truncation]], [[alarm-length_drift]], [[alarm-length_collapse]], [[alarm-kl_blowup]],
[[alarm-entropy_collapse]], [[alarm-grad_spike]], [[alarm-checker_errors]],
[[alarm-checker_timeouts]]. Turn them off or tune their thresholds in the Hyperparameters panel
(*Health alarms*).
""",
        "alarms",
        "alerts",
        "warnings",
    ),
]
