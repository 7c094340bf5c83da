"""The accuracy reward of a reasoning-gym task run: the task's own checker on the final answer.

A task's `score_answer(answer, entry)` needs the problem's entry, whose metadata the answer alone
does not carry (countdown checks the numbers used and the target). The entries are a pure, cached
function of the data settings (engine.data.tasks), so `TaskVerifier` regenerates them and finds a
problem's entry by its question: every call site that already has the problem text (a training
step, held-out evaluation, Try, Compare, `score`, the Lab) scores with it, and nothing has to
carry entries through Examples, events or files. A problem that is not one of the task's (a typed
prompt, a row of another file) is scored with an entry made of its question and reference; when
the task's checker needs more than that, the verdict says so (score None: unknown).

The final answer is found as the app's own checker finds it (engine.rewards.answers: the answer
tags, else \\boxed{}, else the final-answer sentence, else the last value; the text after
</think> first). For a numeric reference the value read there is passed ("288" from "288
apples."), for other answers (an expression, a sentence) the region's whole text. A hedge,
several different answers (two tags, "17 or 18" for a number), scores 0 under the strict
checker, as the app's checker does; the lenient one passes the last. Partial credit is the
task's: countdown gives 0.05 to a wrong expression. The checkers run in this process (some
evaluate the answer with sympy, as reasoning-gym does everywhere): answers they could never finish
(9**9**9, a factorial) and answers over MAX_ANSWER_CHARS score 0 without being checked.

Torch-free. `functions.RewardSet` uses this when its data settings are a task's; the other call
sites use `accuracy_verdicts_for`.

Try it:  python -c "from grpo_desktop.engine.config import DataConfig; from \\
grpo_desktop.engine.rewards.task_score import TaskVerifier; v = TaskVerifier(DataConfig(\\
source='task', task='chain_sum', task_size=10, eval_size=0)); e = v.problems.train[0]; \\
print(v.verdicts([e['question']], ['<answer>' + e['answer'] + '</answer>'], [e['answer']]))"
"""

from __future__ import annotations

import re
from typing import Any

from grpo_desktop.engine.config import DataConfig, RewardsConfig
from grpo_desktop.engine.data.tasks import TaskProblems, task_problems
from grpo_desktop.engine.rewards.answers import last_sentence, read_answer, read_reference
from grpo_desktop.engine.rewards.functions import (
    AccuracyVerdict,
    accuracy_options,
    accuracy_verdicts,
)
from grpo_desktop.engine.rewards.regions import boxed_contents
from grpo_desktop.engine.rewards.values import normalise_text

_HEDGE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly)\b", re.IGNORECASE)
MAX_ANSWER_CHARS = 2000  # longer final answers are not handed to the task's checker
# Several tasks evaluate the answer with sympy (countdown: parse_expr), which computes a tower of
# powers such as 9**9**9 (or factorial(99999999)) exactly and never returns: an answer with two
# powers, an exponent of five or more digits or a factorial is not handed to the checker.
_POWER = re.compile(r"\*\*|\^")
_BIG_EXPONENT = re.compile(r"(?:\*\*|\^)\s*[({]?\s*\d{5,}|factorial|\d\s*!")


def _scopes(text: str, think_tag: str) -> list[str]:
    cut = text.rfind(f"</{think_tag}>")
    return [text[cut + len(think_tag) + 3 :], text] if cut != -1 else [text]


def _tag_texts(scope: str, tag: str) -> list[str]:
    pattern = rf"<{re.escape(tag)}>((?:(?!<{re.escape(tag)}>).)*?)</{re.escape(tag)}>"
    return [m.strip() for m in re.findall(pattern, scope, re.DOTALL) if m.strip()]


def _region_texts(text: str, where: str, answer_tag: str, think_tag: str) -> list[str]:
    """The raw texts of the region `read_answer` found the answer in (tags or boxes)."""
    for scope in _scopes(text, think_tag):
        found = _tag_texts(scope, answer_tag) if where == "answer tag" else boxed_contents(scope)
        if found:
            return found
    return []


def _last_line(text: str, think_tag: str) -> str | None:
    scope = _scopes(text, think_tag)[0].strip() or text.strip()
    lines = [ln.strip() for ln in scope.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _unless_hedged(text: str | None, reference: str, checker: str) -> tuple[str | None, str | None]:
    """A text answer that offers alternatives ("A is a knight or a knave", "3*4 or 5+7") is a
    hedge (strict: none), unless the reference itself has the word."""
    if text is None or checker != "strict":
        return text, None
    word = _HEDGE.search(text)
    if word and not _HEDGE.search(str(reference)):
        return None, f"several answers: the answer hedges ('{word.group(0)}'): {text[:60]}"
    return text, None


def final_answer(
    completion: str,
    reference: str,
    *,
    mode: str = "auto",
    answer_tag: str = "answer",
    think_tag: str = "think",
    checker: str = "strict",
    **_: Any,
) -> tuple[str | None, str | None]:
    """(the answer text the task's checker is given, why none is given): (None, reason) when no
    final answer is found or (strict) the answer hedges."""
    refs = read_reference(str(reference)) if reference else ()
    numeric = len(refs) == 1 and refs[0].number is not None
    reading = read_answer(completion, mode, answer_tag, think_tag)
    if reading.where in ("answer tag", "boxed"):
        texts = _region_texts(normalise_text(completion), reading.where, answer_tag, think_tag)
        distinct = list(dict.fromkeys(texts))
        if len(distinct) > 1 and checker == "strict":
            return None, f"several answers: {', '.join(distinct[:5])}"
        if not numeric:
            return _unless_hedged(distinct[-1] if distinct else None, reference, checker)
    if reading and (numeric or reading.where not in ("", "last value")):
        found = reading.distinct()
        if len(found) > 1 and checker == "strict" and numeric:
            return None, f"several answers: {', '.join(v.text for v in found[:5])}"
        if numeric:
            return (found[0] if len(found) == 1 else reading.values[-1]).text, None
    if numeric:
        return None, "no final answer found"
    line = _last_line(normalise_text(completion), think_tag)
    if line is None and (sentence := last_sentence(completion, think_tag)):
        line = sentence.values[0].text
    return _unless_hedged(line, reference, checker) if line else (None, "no final answer found")


_INDEXES: dict[int, tuple[TaskProblems, dict]] = {}  # id(problems) -> (problems, its index)


def _index(p: TaskProblems) -> dict[str, tuple[Any, dict]]:
    """question -> (dataset, entry), built once per cached TaskProblems."""
    held = _INDEXES.get(id(p))
    if held is not None and held[0] is p:
        return held[1]
    index: dict[str, tuple[Any, dict]] = {}
    for dataset, entries in ((p.datasets[0], p.train), (p.datasets[1], p.eval)):
        for e in entries:
            index.setdefault(str(e["question"]).strip(), (dataset, e))
    if len(_INDEXES) >= 8:
        _INDEXES.clear()
    _INDEXES[id(p)] = (p, index)
    return index


class TaskVerifier:
    """Scores completions of a task's problems with the task's own checker (see the module)."""

    def __init__(self, data: DataConfig):
        self.data = data
        self._problems: TaskProblems | None = None
        self._index: dict[str, tuple[Any, dict]] | None = None

    @property
    def problems(self) -> TaskProblems:
        if self._problems is None:
            self._problems = task_problems(self.data)
        return self._problems

    def entry(self, problem: str) -> tuple[Any, dict] | None:
        """(the dataset that generated it, the entry) of a problem, by its question; None if the
        problem is not one of the run's."""
        if self._index is None:
            self._index = _index(self.problems)
        return self._index.get(str(problem).strip())

    def _score(self, problem: str, answer: str | None, reference: str) -> tuple[float | None, str]:
        found = self.entry(problem)
        if found is None and not str(reference or "").strip():
            return None, "no reference answer: not one of the task's problems"
        if found is None:
            dataset = self.problems.datasets[0]
            entry = {"question": problem, "answer": reference, "metadata": {}}
        else:
            dataset, entry = found
        try:
            return float(dataset.score_answer(answer, entry)), ""
        except Exception as exc:
            if found is None:
                return None, (
                    f"not one of the task's problems, and its checker needs the task's own entry "
                    f"({type(exc).__name__})"
                )
            return 0.0, f"the task's checker failed on this answer ({type(exc).__name__}: {exc})"

    def verdicts(
        self,
        problems: list[str],
        completions: list[str],
        answers: list[str],
        **options: Any,
    ) -> list[AccuracyVerdict]:
        """One AccuracyVerdict per completion; `options` are `accuracy_options(rewards)`."""
        if not len(problems) == len(completions) == len(answers):
            raise ValueError(
                f"{len(problems)} problems, {len(completions)} completions, {len(answers)} answers"
            )
        out = []
        for problem, completion, reference in zip(problems, completions, answers):
            text, why = final_answer(completion, reference, **options)
            if text is None:
                out.append(AccuracyVerdict(0.0, None, why))
                continue
            if len(text) > MAX_ANSWER_CHARS:
                out.append(AccuracyVerdict(0.0, text[:80] + "...", "the final answer is too long"))
                continue
            if len(_POWER.findall(text)) > 1 or _BIG_EXPONENT.search(text):
                why = "powers too large to check safely"
                out.append(AccuracyVerdict(0.0, text[:80], why))
                continue
            score, reason = self._score(problem, text, reference)
            out.append(AccuracyVerdict(score, text, reason or None))
        return out


def task_verifier(data: DataConfig | None) -> TaskVerifier | None:
    """The verifier of a task run's data settings; None for the other sources."""
    return TaskVerifier(data) if data is not None and data.source == "task" else None


def accuracy_verdicts_for(
    data: DataConfig | None,
    rewards: RewardsConfig,
    problems: list[str],
    completions: list[str],
    answers: list[str],
) -> list[AccuracyVerdict]:
    """The run's accuracy verdicts: the task's checker for a task run, else the app's checker."""
    verifier = task_verifier(data)
    if verifier is None:
        return accuracy_verdicts(completions, answers, **accuracy_options(rewards))
    return verifier.verdicts(problems, completions, answers, **accuracy_options(rewards))
