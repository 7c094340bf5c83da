"""What every subcommand shares: exit codes and the one-paragraph error message on stderr."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"grpo-desktop: {message}", file=sys.stderr)
    return code


class Usage(Exception):
    """Bad command-line input: its text is printed as the error, exit 2."""
