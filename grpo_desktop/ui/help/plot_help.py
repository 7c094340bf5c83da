"""Help entries for the training plots (ui/plots/view.py): what each shows, what healthy looks
like and what a bad sign looks like. One entry per plot, anchored `plot-<name>` with the plot's
name in PlotsView (a test fails when a plot has no entry). Data only, Qt-free.
Try it: the "?" before a plot's title, or F1 over a plot; tests/ui/help/test_help.py.
"""

from __future__ import annotations

from grpo_desktop.ui.help.entry import Topic

S = "Training plots"


def _plot(name: str, title: str, body: str, *keywords: str) -> Topic:
    return Topic(f"plot-{name}", title, S, body, ("plot", *keywords))


PLOT_TOPICS = [
    _plot(
        "reward",
        "Reward",
        """
**What it shows.** The mean [[reward]] of all the step's answers (thick blue line), a band of ±
the mean spread inside groups (`reward_std`), and each [[reward-parts|reward part]] on its own
(dashed, unweighted: accuracy is the share of right answers, format the share of answers in the
expected format).

**Healthy.** The mean rises over the steps, with noise, and the band stays open: groups keep some
spread, so there is still something to learn. The accuracy part rises with it.

**Bad signs.** Reward rising while [[plot-eval]] stays flat or falls: [[reward-hacking]] — check
which part rises (often format alone). A flat reward with a band near zero: no spread, see
[[no-signal]]. A sudden fall, often with a [[plot-kl]] jump: the answers broke down (look at them
in the Rollouts tab); go back to a checkpoint and lower the learning rate.
""",
        "reward_std",
        "mean reward",
    ),
    _plot(
        "eval",
        "Held-out accuracy",
        """
**What it shows.** Every few steps (*Evaluate every*) the model answers problems it never trains
on, greedily (always its likeliest token), and the checker marks them: red dots are the share
right ([[held-out-accuracy]]), grey triangles the share in the expected [[format|format]].

**Healthy.** Accuracy climbs with the [[plot-reward]]; it moves by a few points from one
evaluation to the next (100 problems wobble by about 5 points), so read the trend.

**Bad signs.** Reward up, accuracy flat or down: [[reward-hacking]]. Format at 100 % while accuracy
falls: the format bonus is being farmed. Accuracy falling after a peak: stop and keep the best
checkpoint.
""",
        "side evaluation",
        "greedy",
    ),
    _plot(
        "zero",
        "No-signal groups",
        """
**What it shows.** The share of the step's groups whose answers all got the same reward
(`frac_reward_zero_std`). Such a group's [[advantage|advantages]] are all 0, so it teaches
nothing ([[no-signal]]).

**Healthy.** Well below 1, and it may slowly rise late in a run as the model masters the
problems (more all-right groups).

**Bad signs.** Near 1 for several steps: the step was wasted. All wrong means the problems are too
hard (or the checker can never say yes: check the answers in the Rollouts tab); all right means too
easy. A larger [[g|group size G]] or a higher [[temperature]] makes a mixed group likelier.
[[lab:signal|See which groups teach in the Lab]].
""",
        "frac_reward_zero_std",
        "zero std",
    ),
    _plot(
        "hist",
        "Advantages, latest step",
        """
**What it shows.** A histogram of the [[advantage|advantages]] of the latest step's answers: green
bars (above 0) are answers made more likely, red bars (below 0) less likely.

**Healthy.** Bars on both sides of 0. With 0/1 rewards and group [[std|standard deviation]] scaling, a group with one
right answer gives one tall positive value and several small negative ones (+1.73 and −0.58 for
G = 4), so the shape is lopsided and that is fine.

**Bad signs.** A single bar at 0: no group had any spread ([[no-signal]]). Values far beyond ±3
with [[advantage-scaling|scaling]] "none" mean large rewards: consider scaling by the group std.
""",
        "histogram",
    ),
    _plot(
        "heat",
        "Advantages by step",
        """
**What it shows.** The [[plot-hist|advantage histogram]] of every step side by side: each column is one step, darker
cells hold more answers. Click a column to open that step's answers.

**Healthy.** Dark cells above and below 0 all along the run.

**Bad signs.** A dark band exactly at 0 with nothing around it: steps without signal
([[no-signal]]). The band at 0 growing over the run: the problems are becoming too easy.
""",
        "heat map",
    ),
    _plot(
        "length",
        "Length (tokens)",
        """
**What it shows.** The mean answer length in tokens, with the shortest–longest range of the step
as a band.

**Healthy.** Roughly steady, or changing slowly while [[plot-eval]] improves (a model that learns
to reason may write a bit more).

**Bad signs.** Length growing steadily while accuracy is flat: the [[length-bias]] of the grpo
loss (the [[alarm-length_drift]] alarm). Length shrinking toward nothing: the
[[alarm-length_collapse]] alarm. The
longest answers pinned at the limit: see [[plot-truncated]].
""",
        "completion length",
        "mean_length",
    ),
    _plot(
        "truncated",
        "Truncated",
        """
**What it shows.** In orange, the share of answers cut off at *Max completion tokens* before they
finished (`completions/clipped_ratio`, see [[truncation]]). In red, when you use your own
checker, the share of answers it failed on (raised an error, hung or returned no number).

**Healthy.** Orange near 0; red at 0.

**Bad signs.** Orange above about half: answers have no final answer to score, so learning starves
(the [[alarm-truncation]] alarm) — raise *Max completion tokens* or ask for shorter reasoning. Any red:
your checker has a bug (the [[alarm-checker_errors]] alarm); *Test checker* in the Reward panel shows the
error.
""",
        "clipped_ratio",
        "cut off",
        "checker errors",
    ),
    _plot(
        "kl",
        "KL",
        """
**What it shows.** How far the model has moved from the [[reference-model]] (where it started),
averaged over the answers' tokens ([[kl]]). Only with KL penalty β above 0; at β = 0 the plot
says there is nothing to draw.

**Healthy.** Starts at 0 and rises slowly and smoothly: the model is changing, on a leash.

**Bad signs.** A sudden jump far above its usual level (the [[alarm-kl_blowup]] alarm): often before
gibberish or a collapse. Lower the learning rate or raise β.
""",
        "divergence",
        "beta",
    ),
    _plot(
        "loss",
        "Loss",
        """
**What it shows.** The GRPO [[loss|loss]] of each step: minus each token's log-probability
weighted by its answer's advantage, plus β × KL when β is above 0.

**Healthy.** Hovering near 0, noisily. That is normal: a group's advantages add up to zero, so
with one update per batch the policy part is about 0 whatever the model learns. Do not expect it to
go down like a supervised loss.

**Bad signs.** Rarely informative on its own: watch [[plot-reward]] and [[plot-eval]]. NaN or huge
values mean the training broke (check [[plot-grad_norm]]).
""",
        "objective",
    ),
    _plot(
        "entropy",
        "Entropy",
        """
**What it shows.** How spread the model's next-token choices are, averaged over the answers'
tokens ([[entropy]]). High: many tokens are plausible. Low: the model is nearly certain.

**Healthy.** A slow decline as the model becomes surer of good answers.

**Bad signs.** A fast drop far below where it started (the [[alarm-entropy_collapse]] alarm): the answers in
a group become identical, groups lose their spread and learning stops. Raise the
[[temperature]], lower the learning rate or add a KL penalty.
""",
        "exploration",
    ),
    _plot(
        "lr",
        "Learning rate",
        """
**What it shows.** The learning rate used at each step: it rises over the *Warm-up steps*, then
follows the *LR schedule* (constant, linear or cosine decay).

**Healthy.** The shape you chose. Typical values: around 1e-6 to 1e-5 for full fine-tuning of a
real model, 1e-5 to 1e-4 with [[lora]].

**Bad signs.** Nothing goes wrong here by itself, but if [[plot-kl]] jumps or [[plot-grad_norm]]
spikes, a lower learning rate is the first thing to try.
""",
        "schedule",
        "warm-up",
    ),
    _plot(
        "grad_norm",
        "Grad norm",
        """
**What it shows.** The size of each update (the gradient's norm) before [[gradient-clipping]].

**Healthy.** Noisy but within a steady range. Steps without signal have a gradient of 0: dips to 0
are those steps.

**Bad signs.** One spike far above the usual level is usually harmless with clipping on;
repeated spikes mean unstable training (the [[alarm-grad_spike]] alarm): lower the learning rate and keep
clipping at 1.0.
""",
        "gradient",
    ),
]
