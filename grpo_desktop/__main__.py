"""`python -m grpo_desktop` is the same as the `grpo-desktop` command."""

import sys

from grpo_desktop.cli import main

if __name__ == "__main__":
    sys.exit(main())
