"""Help entries for the health alarms: one per kind in engine/alarm_kinds.py, anchored
`alarm-<kind>`. The title and the explanation are read from alarm_kinds (so banner, tooltip and
Help say the same); this module adds only where to look and what usually helps, in general terms
(the banner's own advice has the run's numbers). A kind without an entry in WHAT_TO_DO fails a
test, and still gets its explanation here. Data only, Qt-free.
Try it: `python -m grpo_desktop.ui.help.topics reward hacking`; tests/ui/help/test_help_topics.py.
"""

from __future__ import annotations

from grpo_desktop.engine.alarm_kinds import ALARMS
from grpo_desktop.ui.help.entry import Topic

S = "Alarms"

WHAT_TO_DO = {  # kind: (where to look, what usually helps), in the markup of topics.py
    "reward_hacking": (
        "[[plot-reward]] next to [[plot-eval]]; the dashed reward parts show which part rises. In "
        "the Rollouts tab, sort by reward: are the top answers right, or only well formatted?",
        "Give accuracy the largest weight and keep format small (accuracy 1.0, format 0.2). Use the "
        "strict checker, so hedges such as “398 or 408” score 0. Keep a held-out set and trust it "
        "over the reward. A KL penalty β slows hacking down but does not stop it. "
        "[[lab:reward|Try the format weight in the Lab]]. See [[reward-hacking]].",
    ),
    "no_signal": (
        "[[plot-zero]] near 1; in the Rollouts tab, whether the flat groups are all right or all "
        "wrong (the banner says which).",
        "All wrong: easier problems, a larger [[g|group size G]] so a rare right answer shows up, a "
        "higher [[temperature]], or more completion tokens if answers are cut off. All right: harder "
        "problems. *Dynamic sampling* (advanced) drops flat groups and samples new problems in "
        "their place. "
        "[[lab:signal|See which groups teach]]. See [[no-signal]].",
    ),
    "format_flat": (
        "The dashed format line on [[plot-reward]] flat at 0; in the Rollouts tab, whether any "
        "answer writes the think and answer tags.",
        "Set *Format credit* to per tag in the Reward panel (partial credit for each well-placed "
        "tag), so the answers with more tags win. Add a worked example in the Dataset panel (a "
        "problem and its answer in the tags): a small model copies a format it is shown, where "
        "it ignores one it is only told about. Or set the format weight to 0 if the format does not "
        "matter to you. [[lab:reward|Compare the credits in the Lab]]. See [[format-credit]].",
    ),
    "truncation": (
        "[[plot-truncated]] (orange) and [[plot-length]]: the longest answers sit at the limit.",
        "Raise *Max completion tokens*, or ask for shorter reasoning in the system prompt. *Mask "
        "truncated* (advanced) leaves cut-off answers out of the loss instead of punishing them. "
        "See [[truncation]].",
    ),
    "length_drift": (
        "[[plot-length]] against [[plot-eval]]: is accuracy rising with the length?",
        "If accuracy is flat, it is the [[length-bias]]: try the Dr. GRPO or DAPO loss (*Loss "
        "aggregation*), which drop the per-answer length normalisation, or a KL penalty β. If "
        "answers get shorter with flat accuracy, check whether the reward favours short answers.",
    ),
    "length_collapse": (
        "[[plot-length]] falling toward 0; the answers themselves in the Rollouts tab.",
        "Stop and go back to an earlier checkpoint. Then lower the learning rate, raise β, and check "
        "that a right answer can score at all (test the checker on real answers).",
    ),
    "kl_blowup": (
        "[[plot-kl]]; [[plot-grad_norm]] and [[plot-entropy]] at the same step.",
        "Lower the learning rate or raise β. If answers turn to gibberish, go back to an earlier "
        "checkpoint. See [[kl]].",
    ),
    "entropy_collapse": (
        "[[plot-entropy]]; [[plot-zero]] usually rises soon after, as groups stop differing.",
        "Raise the [[temperature]], lower the learning rate, or add a KL penalty β to keep the model "
        "exploring. See [[entropy]].",
    ),
    "grad_spike": (
        "[[plot-grad_norm]]; whether [[plot-kl]] or [[plot-reward]] moved at the same step.",
        "One spike is usually harmless with [[gradient-clipping]] on. If they repeat, lower the "
        "learning rate and keep clipping at 1.0.",
    ),
    "checker_errors": (
        "[[plot-truncated]] (red) and, in the Rollouts tab, the *Checker error* column.",
        "Open the Reward panel and press *Test checker*: it runs your checker on the latest answers "
        "and shows each error. Make it return None (could not score) rather than raise on answers "
        "it cannot read.",
    ),
    "checker_timeouts": (
        "The log, and *Test checker* in the Reward panel.",
        "Make the checker faster (no network, no long loops), or raise its time limit in the "
        "Reward panel.",
    ),
}


def alarm_topics() -> list[Topic]:
    out = []
    for kind, info in ALARMS.items():
        where, todo = WHAT_TO_DO.get(kind, ("", ""))
        severity = "Critical alarm" if info.severity == "critical" else "Warning"
        body = f"**{severity}** (`{kind}`). {info.explanation}"
        if where:
            body += f"\n\n**Where to look.** {where}"
        if todo:
            body += f"\n\n**What usually helps.** {todo}"
        body += (
            "\n\nThe message line above the plots says what this run saw, with its numbers (*More…* "
            "for the whole text); its × hides it until a new run starts, and ‹ › step through "
            "the other messages. See also [[health-alarms]]."
        )
        keywords = ("alarm", "alert", "banner", kind.replace("_", " "))
        out.append(Topic(f"alarm-{kind}", info.title, S, body, keywords))
    return out
