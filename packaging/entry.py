"""PyInstaller entry point: the frozen app runs the same `main()` as the `grpo-desktop` command."""

import sys

from grpo_desktop.engine.checker.child import run_if_child

if __name__ == "__main__":
    run_if_child()  # started again as the custom checker's locked-in child (checker.py)
    from grpo_desktop.cli import main

    sys.exit(main())
