"""Where the tests find the repository, their fixtures and the benchmarks, wherever a test file sits."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
FIXTURES = os.path.join(TESTS, "fixtures")
SUPPORT = os.path.join(TESTS, "support")
BENCH = os.path.join(ROOT, "bench")
