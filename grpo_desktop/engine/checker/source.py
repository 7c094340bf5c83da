"""Check user checker code before anything runs it: syntax, and a usable check() function.

`compile_checker` compiles the source and inspects its top level for a `check` taking three
arguments; it runs none of the code (the parent never does). Every message starts with a label
("The custom checker …") so it reads right wherever it is shown, and a function with a likely
other name (reward(), score() …) is named: "… defines reward() (line 1) instead of check():
rename it to check(completion, answer, prompt)". The GUI calls it as you type.

Not here: running the code (checker/runner.py, in a locked-in child). Standard library only.
Try it:  python -c "from grpo_desktop.engine.checker.source import compile_checker as c; \\
c('def reward(c, a, p):\\n    return 1.0')"
"""

from __future__ import annotations

import ast

from grpo_desktop.engine.checker.child import FILENAME, MAX_TEXT, NEEDS_CHECK, clean_text
from grpo_desktop.engine.errors import CheckerError

LABEL = "The custom checker"
# Names people give the function when they have not read that it must be called check.
_LIKELY = ("reward", "score", "grade", "judge", "verif", "evaluat", "check", "correct", "accura")


def compile_checker(source: str, label: str = LABEL) -> None:
    """Raise CheckerError when the source cannot work: a syntax error, or no usable check().

    Runs none of the user's code (the parent never does): the syntax is compiled and the module's
    top level is inspected for a `check` definition taking three arguments. Every message starts
    with `label`, so it reads right wherever it is shown (the CLI, a message bar).
    """
    try:
        tree = compile(source, FILENAME, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        compile(tree, FILENAME, "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = clean_text(exc.text or "", MAX_TEXT).strip()  # no terminal escapes shown
        text = f" ({line})" if line else ""
        raise CheckerError(
            f"{label} has a syntax error, line {exc.lineno}: {exc.msg}{text}"
        ) from None
    except ValueError as exc:  # null bytes in the source
        raise CheckerError(f"{label} cannot be compiled: {exc}.") from None
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "check":
            raise CheckerError(
                f"{label}, line {node.lineno}: check must be a plain def, not async def"
            )
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            _check_signature(node, label)
            return
        if _binds_check(node):
            return
    raise CheckerError(_missing_check(tree, source, label))


def _missing_check(tree: ast.Module, source: str, label: str) -> str:
    """Why there is no check(): empty code, a method, a likely other name, or nothing like it."""
    if not source.strip():
        return f"{label} is empty: {NEEDS_CHECK}"
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "check":
                    return (
                        f"{label} defines check() inside class {node.name} (line {item.lineno}); "
                        "define it at the top level, outside any class"
                    )
    for node in defs:
        if any(word in node.name.lower() for word in _LIKELY):
            return (
                f"{label} defines {node.name}() (line {node.lineno}) instead of check(): rename "
                "it to check(completion, answer, prompt)"
            )
    if defs:
        names = ", ".join(f"{n.name}()" for n in defs[:5])
        return f"{label} defines {names} but no check(): {NEEDS_CHECK}"
    return f"{label} defines no check() function: {NEEDS_CHECK}"


def _binds_check(node: ast.stmt) -> bool:
    """Whether a top-level statement other than a def binds the name `check`."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == "check" for t in targets)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name) == "check" for a in node.names)
    if isinstance(node, ast.ClassDef):
        return node.name == "check"
    return False


def _check_signature(node: ast.FunctionDef, label: str) -> None:
    args = node.args
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    required_kw = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if (positional < 3 and args.vararg is None) or required > 3 or required_kw:
        given = ", ".join(a.arg for a in [*args.posonlyargs, *args.args])
        raise CheckerError(
            f"{label}, line {node.lineno}: check() must take three arguments (completion, "
            f"answer, prompt), not ({given})"
        )
