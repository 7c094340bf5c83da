"""What every subcommand shares: exit codes, the one-paragraph error message on stderr, and the
trust gate for custom checker code (`train` and `score` ask the same question)."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"grpo-desktop: {message}", file=sys.stderr)
    return code


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
