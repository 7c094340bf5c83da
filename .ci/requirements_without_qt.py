"""Print the project's requirements and test requirements from pyproject.toml, less Qt.

CI's second test step installs these into a fresh venv and runs `pytest tests/engine
tests/session` there: the engine and session layers must work where PySide6 is not installed.

Needs Python 3.11+ (tomllib), as CI has. Try it:  python .ci/requirements_without_qt.py
"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

QT = {"pyside6", "pyside6-essentials", "pyqtgraph", "pytest-qt"}


def main() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    for requirement in wanted:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()
        if name not in QT:
            print(requirement)


if __name__ == "__main__":
    main()
