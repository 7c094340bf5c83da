"""PyInstaller entry point: the frozen app runs the same `main()` as the `grpo-desktop` command."""

import sys

from grpo_desktop.cli import main

if __name__ == "__main__":
    sys.exit(main())
