"""GRPO Desktop: fine-tune a language model with GRPO on your own workstation and watch it learn."""

import logging
import os

__version__ = "0.1.0"

# OpenMP threads (libgomp: torch's Linux builds) spin for a long time (300,000 rounds) at each
# barrier before they sleep. When another program keeps a core busy, that spinning starves the
# work: with one busy neighbour on 2 cores a demo step took 24 s instead of 2.6 s. Too short a
# spin costs on free cores instead: the threads fall asleep and are woken at nearly every small
# operation (1,000 rounds: demo steps 0.92 s against 0.72 s at 10,000 on an idle 2-core Xeon).
# 10,000 is as fast as the default on free cores; with a busy neighbour the passes and the decode
# drop to fewer threads when that is faster (engine/grpo/update_threads.py,
# engine/sampling/decode_threads.py), and steps took 1.25 s against 1.10 s at 1,000
# (bench/README.md, "Session 14"). Set before torch loads its OpenMP runtime (importing this
# package comes first); a value the user set wins.
OPENMP_SPINCOUNT = "10000"
os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPINCOUNT)

# bitsandbytes warns when it is imported (by peft too) that it cannot fetch an optional CPU kernel
# from the hub; this app never downloads kernels at run time, so the warning is only noise.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
