"""reasoning-gym tasks as a data source: the catalogue, and a run's training and held-out problems.

reasoning-gym (an optional extra: pip install "grpo-desktop[tasks]") generates the verifiable
problems RLVR practitioners train on (countdown, knights_knaves, gsm_symbolic, ...), each task with
its own checker. `catalogue`, `task_names` and `task_info` are the catalogue the Dataset panel's picker shows
(name, one-line description, an example, the task's parameters from its config dataclass);
`task_problems(cfg)` generates a run's problems: training problems from seed `data.task_seed`,
held-out ones from a different seed, and training problems whose question is also held out are
dropped, so the two never overlap.

The problems are a pure function of the data settings (task, options, sizes, seed) and cached,
which is how the task's checker finds a problem's entry (its metadata: countdown's numbers and
target) from the question alone: engine.rewards.task_score regenerates them and looks them up,
so no reward call site has to carry the entry.

reasoning_gym is imported only inside functions (it is slow to import and pulls matplotlib);
without it, `require_reasoning_gym` raises a DataError that says how to install it.

Try it:  python -c "from grpo_desktop.engine.data.tasks import task_info; print(task_info('countdown'))"
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from grpo_desktop.engine.config import DataConfig
from grpo_desktop.engine.errors import DataError

INSTALL_HINT = 'pip install "grpo-desktop[tasks]" (or pip install reasoning-gym)'
# Held-out problems come from task_seed + this. reasoning-gym draws problem i of seed s from
# Random(s + i), so with at most 1,000,000 training problems (data.task_size's maximum) the two
# sets never share a generator; equal questions that still occur are dropped from training.
HELD_OUT_SEED_OFFSET = 1_000_003
_NOT_TASKS = {"composite"}  # a mixture of other tasks, configured by a list of them
_HIDDEN_FIELDS = {"seed", "size"}  # set by the app, not by the user
# One-line descriptions where the task's own docstring has none or says little.
_DESCRIPTIONS = {
    "gsm_symbolic": "Grade-school math word problems (GSM8K templates with new numbers)",
    "countdown": "Reach a target number using the given numbers once each (TinyZero's task)",
    "knights_knaves": "Who tells the truth and who lies? (Logic-RL's puzzles)",
    "basic_arithmetic": "Arithmetic expressions with + - * / and parentheses",
    "products": "Multiplications of numbers with a chosen number of digits",
    "chain_sum": "Sums and differences of several numbers",
}


@dataclass(frozen=True)
class TaskField:
    """One parameter of a task: its name, kind ('int', 'float', 'bool', 'str', 'list', or
    'other' for values a form cannot edit: dates, nested options, lists of pairs), default, and
    the allowed values when the config declares them (a Literal)."""

    name: str
    kind: str
    default: Any
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskInfo:
    name: str
    description: str
    example_question: str
    example_answer: str
    fields: tuple[TaskField, ...]


@dataclass(frozen=True)
class TaskProblems:
    """A run's problems as the task's entries ({question, answer, metadata}), and a summary."""

    train: tuple[dict, ...]
    eval: tuple[dict, ...]
    desc: str
    datasets: tuple[Any, Any]  # (training dataset, held-out dataset): their score_answer


def require_reasoning_gym() -> Any:
    """The reasoning_gym module, or a DataError saying how to install it."""
    try:
        import reasoning_gym
    except ImportError:
        raise DataError(
            "The task data source needs the reasoning-gym package, which is not installed. "
            f"Install it with {INSTALL_HINT}, then choose the task again."
        ) from None
    return reasoning_gym


def _registry() -> dict[str, tuple[type, type]]:
    rg = require_reasoning_gym()
    return {k: v for k, v in rg.factory.DATASETS.items() if k not in _NOT_TASKS}


def task_names() -> list[str]:
    """Every task reasoning-gym offers, sorted."""
    return sorted(_registry())


def _config_class(name: str) -> type:
    registry = _registry()
    if name not in registry:
        close = [n for n in sorted(registry) if name and (name in n or n in name)][:5]
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise DataError(
            f"reasoning-gym has no task named '{name}'.{hint} Pick one in the Dataset panel's task "
            'list, or run: python -c "import reasoning_gym; print(sorted('
            'reasoning_gym.factory.DATASETS))"'
        )
    return registry[name][1]


def describe(name: str) -> str:
    """The task's one-line description (its docstring's first line, or the app's own)."""
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    dataset_cls, config_cls = _registry()[name]
    for cls in (dataset_cls, config_cls):
        doc = (cls.__doc__ or "").strip()
        line = doc.splitlines()[0].strip() if doc else ""
        line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)  # a markdown link: its text
        if line and not line.startswith(("Configuration", "Config", cls.__name__ + "(")):
            return line.rstrip(".")
    return name.replace("_", " ").capitalize()


def catalogue() -> list[tuple[str, str]]:
    """(name, one-line description) of every task, sorted by name: the picker's list (no
    problem is generated, so it is quick)."""
    return [(name, describe(name)) for name in task_names()]


def _kind(hint: Any, default: Any) -> tuple[str, tuple[str, ...]]:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return "str", tuple(str(a) for a in typing.get_args(hint))
    if origin is typing.Union:  # Optional[int]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _kind(args[0], default) if args else ("str", ())
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if hint is types:
            return kind, ()
    if origin in (list, tuple) or hint in (list, tuple) or isinstance(default, (list, tuple)):
        return "list", ()
    return "str", ()


def _plain(value: Any) -> bool:
    """Whether a form can show and edit the value: a number, text, true/false, None, or a list
    of numbers and text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (int, float, str)) for v in value)
    return False


def task_fields(name: str) -> tuple[TaskField, ...]:
    """The task's parameters, read from its config dataclass (seed and size left out)."""
    config_cls = _config_class(name)
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:
        hints = {}
    out = []
    for f in dataclasses.fields(config_cls):
        if f.name in _HIDDEN_FIELDS or f.name.startswith("_") or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        kind, choices = _kind(hints.get(f.name, f.type), default)
        if not _plain(default):
            kind, choices = "other", ()
        if isinstance(default, tuple):
            default = list(default)
        out.append(TaskField(f.name, kind, default, choices))
    return tuple(out)


def coerce_options(name: str, options: dict) -> dict:
    """`options` checked against the task's parameters: unknown names are a DataError naming the
    known ones; lists become tuples where the task's default is a tuple."""
    config_cls = _config_class(name)
    if not isinstance(options, dict):
        raise DataError("Task settings (data.task_options) must be an object of name: value pairs.")
    defaults = {f.name: f for f in dataclasses.fields(config_cls)}
    unknown = sorted(k for k in options if k not in defaults or k in _HIDDEN_FIELDS)
    if unknown:
        known = ", ".join(f.name for f in task_fields(name)) or "none"
        raise DataError(
            f"The task '{name}' has no setting {', '.join(unknown)} (data.task_options). Its "
            f"settings are: {known}."
        )
    out = {}
    for key, value in options.items():
        f = defaults[key]
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out[key] = tuple(value) if isinstance(value, list) and isinstance(default, tuple) else value
    return out


def _generate(name: str, options: dict, size: int, seed: int) -> tuple[Any, list[dict]]:
    rg = require_reasoning_gym()
    try:
        dataset = rg.create_dataset(name, size=size, seed=seed, **coerce_options(name, options))
        entries = [dataset[i] for i in range(size)]
    except DataError:
        raise
    except Exception as exc:  # the task's own config checks (assert, ValueError)
        why = str(exc) or type(exc).__name__
        raise DataError(
            f"reasoning-gym could not generate '{name}' problems with these settings ({why}). "
            "Change the task settings (data.task_options) or reset them to the task's defaults."
        ) from None
    return dataset, entries


def _unique(entries: list[dict], taken: set[str]) -> list[dict]:
    out = []
    for entry in entries:
        key = str(entry["question"]).strip()
        if key not in taken:
            taken.add(key)
            out.append(entry)
    return out


def _held_out(name: str, options: dict, n: int, seed: int) -> tuple[Any, list[dict]]:
    """`n` distinct held-out problems when the task has them: a task with few distinct problems
    repeats some (basic_arithmetic with one-digit pairs gave 92 of 100), so more are drawn, up to
    8 × n, and the first n distinct kept (problem i depends only on seed + i, so drawing more
    keeps the first ones)."""
    size = n
    while True:
        dataset, raw = _generate(name, options, size, seed)
        held = _unique(raw, set())
        if len(held) >= n or size >= 8 * n:
            return dataset, held[:n]
        size = min(8 * n, size * 2)


@lru_cache(maxsize=8)
def _problems(name: str, options_json: str, train_n: int, eval_n: int, seed: int) -> TaskProblems:
    options = json.loads(options_json)
    train_ds, train_raw = _generate(name, options, train_n, seed)
    held_ds, held = (None, [])
    if eval_n:
        held_ds, held = _held_out(name, options, eval_n, seed + HELD_OUT_SEED_OFFSET)
    taken = {str(entry["question"]).strip() for entry in held}
    train = _unique(train_raw, taken)
    if not train:
        raise DataError(
            f"Every '{name}' training problem repeats a held-out one (the task has few distinct "
            "problems with these settings). Lower 'Held-out problems' (data.eval_size) or make "
            "the task harder in its settings."
        )
    dropped = len(train_raw) - len(train)
    note = f"; dropped {dropped:,} repeated or held-out problems" if dropped else ""
    held_note = f", {len(held):,} held out (seed {seed + HELD_OUT_SEED_OFFSET})" if eval_n else ""
    desc = (
        f"reasoning-gym task {name}: {len(train):,} training problems (seed {seed}){held_note}"
        f"{note}"
    )
    return TaskProblems(tuple(train), tuple(held), desc, (train_ds, held_ds))


def task_problems(cfg: DataConfig) -> TaskProblems:
    """The training and held-out problems of a task run (cached: a pure function of `cfg`)."""
    if not cfg.task.strip():
        raise DataError("Choose a reasoning-gym task (data.task) for the task data source.")
    try:
        options_json = json.dumps(cfg.task_options, sort_keys=True)
    except TypeError:
        raise DataError(
            "Task settings (data.task_options) must hold only numbers, text, true/false and lists."
        ) from None
    return _problems(cfg.task.strip(), options_json, cfg.task_size, cfg.eval_size, cfg.task_seed)


@lru_cache(maxsize=256)
def task_info(name: str) -> TaskInfo:
    """The catalogue entry of one task: description, an example problem and answer, parameters."""
    fields = task_fields(name)
    _dataset, entries = _generate(name, {}, 1, 0)
    entry = entries[0]
    return TaskInfo(name, describe(name), str(entry["question"]), str(entry.get("answer")), fields)
