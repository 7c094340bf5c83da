"""Launch time of the window: seconds from the process start to the main window shown.

As the app reports it in scripted mode ("window shown N s after the process started": /proc's
start time of the process to the first pass of the event loop after show()). Each launch is
`python -m grpo_desktop --demo --quit-after-steps 0` in a fresh process with its own empty config
and data folders (a first launch: no saved layout, no crash markers), so disk caches are warm
after the first run. Linux only (the start time comes from /proc).

    python bench/launch_time.py                  # 5 launches on $DISPLAY (or offscreen), median
    python bench/launch_time.py --runs 9 --platform offscreen
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

SHOWN = re.compile(r"window shown ([\d.]+) s after the process started")


def launch_once(platform: str | None) -> float:
    with tempfile.TemporaryDirectory(prefix="grpo-launch-") as home:
        env = dict(os.environ, XDG_CONFIG_HOME=f"{home}/config", XDG_DATA_HOME=f"{home}/data")
        env["GRPO_DESKTOP_DATA_DIR"] = f"{home}/data/grpo-desktop"
        env["GRPO_DESKTOP_CONFIG_DIR"] = f"{home}/config/grpo-desktop"
        if platform:
            env["QT_QPA_PLATFORM"] = platform
        out = subprocess.run(
            [sys.executable, "-m", "grpo_desktop", "--demo", "--quit-after-steps", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        found = SHOWN.search(out.stdout)
        if out.returncode != 0 or not found:
            raise SystemExit(f"launch failed (exit {out.returncode}): {out.stderr[-2000:]}")
        return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--platform", help="QT_QPA_PLATFORM (default: $DISPLAY's, else offscreen)")
    args = parser.parse_args()
    platform = args.platform or (None if os.environ.get("DISPLAY") else "offscreen")
    times = [launch_once(platform) for _ in range(args.runs)]
    print("launches (s):", " ".join(f"{t:.2f}" for t in times))
    print(f"median {statistics.median(times):.2f} s, min {min(times):.2f}, max {max(times):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
