"""What every subcommand shares, so each says it the same way.

The exit codes (0 ok, 1 internal error, 2 bad input) and `fail`, the one-paragraph message on
stderr; the arguments that name the settings and grant trust (one wording wherever they appear);
and the trust gates for code that came in a file: custom checker code (`train`, `score`) and a
model's own code (`train`, `eval`, `export`), each refused until trusted here or allowed by its
--trust-* switch, which remembers it. Try: `grpo-desktop score --help` shows the shared wording.
"""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"grpo-desktop: {message}", file=sys.stderr)
    return code


def add_settings_argument(parser) -> None:
    """The optional positional settings source of `train`, `score` and `estimate`."""
    parser.add_argument(
        "config",
        nargs="?",
        help="config JSON (see `grpo-desktop config --demo`) or a session folder (NAME.grpo)",
    )


def add_trust_checker_argument(parser) -> None:
    """--trust-checker (`train`, `score`): the switch `checker_refusal` takes as `allow`."""
    parser.add_argument(
        "--trust-checker",
        action="store_true",
        help="allow the custom checker code in the session or config (Python that runs with "
        "your permissions) and remember it as trusted",
    )


class Usage(Exception):
    """Bad command-line input: its text is printed as the error, exit 2."""


def checker_refusal(cfg, source: str | None, allow: bool) -> str:
    """Why the custom checker in `cfg` (read from `source`) may not run; '' when it may.
    With `allow` (--trust-checker) it may, and is remembered as trusted."""
    from grpo_desktop.session.trust import TrustStore

    code = cfg.rewards.custom_checker
    store = TrustStore()
    if store.is_trusted(code):
        return ""
    if allow:
        store.trust(code)
        return ""
    return (
        f"{source} includes custom checker code (Python that would run on this computer with "
        "your permissions) that you have not trusted here. Read it first (config → rewards → "
        "custom_checker, or open it in the app, which shows it); to run it, add --trust-checker "
        "(remembered for this exact code)."
    )


def remote_code_gate(cfg, source: str | None, run_dir: str | None, allow: bool, folders=()):
    """(refusal, permission) for the model's own code that `cfg` (read from `source`) would
    run — the base model, with `run_dir` the run's checkpoints, and any weight `folders` to be
    loaded; refusal is '' when it may
    run. With `allow` (--trust-remote-code) it may, and is remembered as trusted. The permission
    goes to the engine's loaders, which refuse that code without it."""
    from grpo_desktop.engine.models.remote_code import (
        code_to_trust,
        permission_for,
        refusal_message,
    )
    from grpo_desktop.session.trust import TrustStore

    codes = code_to_trust(cfg.model.name_or_path, cfg.model.trust_remote_code, run_dir, folders)
    store = TrustStore()
    untrusted = store.untrusted_code(codes)
    if untrusted and not allow:
        how = "add --trust-remote-code"
        return refusal_message(untrusted, str(source or "The settings"), how), None
    store.trust_code(untrusted)
    return "", permission_for(codes) if codes else None
