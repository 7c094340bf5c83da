"""GRPO Desktop: fine-tune a language model with GRPO on your own workstation and watch it learn."""

import logging
import os

__version__ = "0.1.0"

# OpenMP threads (libgomp: torch's Linux builds) spin for a long time before they sleep. When
# another process keeps the cores busy, that spinning starves the work: measured on 2 CPU cores
# with one busy neighbour, a demo GRPO step took 24 s instead of 2.6 s. A short spin keeps the
# speed on free cores (0.7-0.8 s per step either way); passive waiting (OMP_WAIT_POLICY=PASSIVE)
# also avoids the collapse but was about 1.5x slower on free cores. Set before torch loads its
# OpenMP runtime (importing this package comes first); a value the user set wins.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")

# bitsandbytes warns when it is imported (by peft too) that it cannot fetch an optional CPU kernel
# from the hub; this app never downloads kernels at run time, so the warning is only noise.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
