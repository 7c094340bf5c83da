"""The reward-design Lab's built-in groups: twelve sampled attempts at 17 × 23 (= 391), and a
small real model's first answers to 8 × 7, none with all the tags (`UNTAGGED_ATTEMPTS`).

The Lab lets the reader design the reward for a group of attempts at one problem. These are
written to show every case a reward designer meets: right with and without the tags, wrong in
tags, a long self-correcting chain, a terse one, a hedge ("381 or 391": the strict checker scores
it 0, the lenient one 1), an empty-ish one, a boxed answer, tags around a guess. The first G form
the group, so G = 2 (two right answers in tags) is the all-right group that teaches nothing, and
the default G = 8 holds a healthy spread.

Lengths are counted in word pieces (`approx_tokens`: words, numbers and punctuation marks), a
stand-in for a tokenizer that the Lab says is an estimate. Pure data, no torch, no Qt.
Try it:  python -c "from grpo_desktop.engine.lab.attempts import *; print(ATTEMPTS[0])"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROMPT = "What is 17 × 23?"
ANSWER = "391"
DEFAULT_G = 8
# Dr. GRPO's constant normaliser for the built-in group: its max completion length (tokens).
MAX_COMPLETION_TOKENS = 160

_PIECE = re.compile(r"\w+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """Word pieces in `text` (words, numbers, each punctuation mark): about a tokenizer's count."""
    return len(_PIECE.findall(text))


@dataclass(frozen=True)
class BuiltinAttempt:
    label: str  # what kind of attempt it is, shown beside it
    completion: str


ATTEMPTS: tuple[BuiltinAttempt, ...] = (
    BuiltinAttempt(
        "right, in tags",
        "<think>17 × 23 = 17 × 20 + 17 × 3 = 340 + 51 = 391.</think><answer>391</answer>",
    ),
    BuiltinAttempt("short, right, in tags", "<think>17×23=391</think><answer>391</answer>"),
    BuiltinAttempt(
        "right, no tags",
        "17 × 20 = 340 and 17 × 3 = 51, so 17 × 23 = 340 + 51. The answer is 391.",
    ),
    BuiltinAttempt(
        "wrong (a carry slip), in tags",
        "<think>17 × 20 = 340. 17 × 3: 7 × 3 = 21, write 1 carry 2, 1 × 3 = 3, so 31... "
        "no carry added: 41. 340 + 41 = 381.</think><answer>381</answer>",
    ),
    BuiltinAttempt(
        "long, right, self-correcting, in tags",
        "<think>Split 23 into 20 + 3. 17 × 20: 17 × 2 = 34, so 340. 17 × 3: 7 × 3 = 21, "
        "write 1 and carry 2; 1 × 3 = 3, plus the carry 2 is 5, so 51. Then 340 + 51 = 381. "
        "Wait, let me re-check the addition: 340 + 50 = 390, plus 1 is 391, not 381. Check it "
        "another way: 23 × 17 = 23 × 10 + 23 × 7 = 230 + 161 = 391. Both ways agree, so "
        "17 × 23 = 391.</think><answer>391</answer>",
    ),
    BuiltinAttempt(
        "hedge, in tags",
        "<think>17 × 23 is about 17 × 25 = 425 minus a bit, so around 390.</think>"
        "<answer>381 or 391</answer>",
    ),
    BuiltinAttempt("empty-ish", "<think>Hmm.</think>"),
    BuiltinAttempt(
        "wrong, no tags",
        "17 × 23 = 17 × 25 − 17 × 2 = 425 − 24 = 401. So the answer is 401.",
    ),
    BuiltinAttempt("right, tags, no reasoning", "<think></think><answer>391</answer>"),
    BuiltinAttempt(
        "wrong, long, in tags",
        "<think>17 × 23: 17 × 3 = 51 and 17 × 2 = 34. Put them side by side: 34 then 51, "
        "3451? That is far too big for two two-digit numbers, so add them instead: "
        "34 + 51 = 85.</think><answer>85</answer>",
    ),
    BuiltinAttempt("right, boxed, no tags", "17 · 23 = 340 + 51 = 391, so \\boxed{391}."),
    BuiltinAttempt("a guess in tags", "<think>I will guess.</think><answer>400</answer>"),
)

# A second built-in group: a small pretrained instruct model's first answers to a prompt that
# asks for the think/answer tags, some of which write some of the tags. None uses all four in
# place, so all-or-nothing format credit scores every one 0: the format part has no spread and
# teaches nothing; per-tag credit ranks them by the tags they got right. (A model that writes no
# tag at all, as SmolLM2-135M-Instruct does under the default system prompt, gets 0 from both:
# then only a prompt that shows the format can start it.)
UNTAGGED_PROMPT = "What is 8 × 7? Think in <think></think>, then answer in <answer></answer>."
UNTAGGED_ANSWER = "56"
UNTAGGED_ATTEMPTS: tuple[BuiltinAttempt, ...] = (
    BuiltinAttempt("terse, right, no tags", "8 × 7 = 56"),
    BuiltinAttempt(
        "explains, right, no tags",
        "To find 8 times 7, add 8 seven times: 8 + 8 + 8 + 8 + 8 + 8 + 8 = 56. So 8 × 7 = 56.",
    ),
    BuiltinAttempt("wrong, no tags", "8 × 7 is 54."),
    BuiltinAttempt(
        "reasoning in tags, answer in prose",
        "<think>8 × 7 = 8 × 5 + 8 × 2 = 40 + 16 = 56</think> The answer is 56.",
    ),
    BuiltinAttempt("opens <think>, never closes it", "<think>Let me multiply 8 by 7. 8 × 7 = 56"),
    BuiltinAttempt(
        "answer tag left open",
        "<think>7 × 8 = 70 − 14 = 56</think><answer>56",
    ),
    BuiltinAttempt("wrong, answer tag only", "<answer>48</answer>"),
    BuiltinAttempt(
        "all tags, a remark after them",
        "<think>8 × 7 = 56</think><answer>56</answer> I hope this helps!",
    ),
)
BUILTIN_GROUPS = {  # name: (prompt, answer, attempts), the Lab's built-in groups
    "multiply": (PROMPT, ANSWER, ATTEMPTS),
    "untagged": (UNTAGGED_PROMPT, UNTAGGED_ANSWER, UNTAGGED_ATTEMPTS),
}
