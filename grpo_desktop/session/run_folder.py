"""Run folders opened read-only: which kind a folder is, and a reader that polls it for new events.

Two kinds are recognised (a session bundle, NAME.grpo, is opened as a session instead):

- "trl": a TRL GRPOTrainer output_dir (session/trl_run.py: `TrlRunReader`);
- "app": one of the app's own run folders, written by `grpo-desktop train --out DIR` or inside a
  session (`events.jsonl`, `config.json`, `checkpoints/`): `EventsFileReader` gives the complete
  lines appended to events.jsonl since the last poll (a line being written waits for the next).

Both readers have `poll() -> list[Event]` and `events_path` (the file older rollouts are paged
from, or None). Neither writes anything. No Qt, no torch. Try: `grpo-desktop open RUN_DIR`.
"""

from __future__ import annotations

import json
import os

from grpo_desktop.engine.events import Event, LogMessage, event_from_dict
from grpo_desktop.engine.runs.files import EVENTS_FILE
from grpo_desktop.session.document import is_session
from grpo_desktop.session.trl_run import TrlRunReader, is_trl_run

TRL, APP = "trl", "app"
KIND_NAMES = {TRL: "a TRL run", APP: "a GRPO Desktop run"}


def run_folder_kind(path: str) -> str | None:
    """TRL, APP, or None (not a run folder; a session bundle is None too)."""
    if not os.path.isdir(path) or is_session(path):
        return None
    if os.path.isfile(os.path.join(path, EVENTS_FILE)):
        return APP
    return TRL if is_trl_run(path) else None


class EventsFileReader:
    """Poll an events.jsonl for the events appended since the last poll."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)
        self.events_path = os.path.join(self.folder, EVENTS_FILE)
        self.offset = 0
        self._warned = False

    def poll(self) -> list[Event]:
        try:
            size = os.path.getsize(self.events_path)
        except OSError:
            return []
        if size < self.offset:  # rewritten shorter (a resumed run trims its log): read again
            self.offset = 0
        if size == self.offset:
            return []
        out: list[Event] = []
        with open(self.events_path, "rb") as fh:
            fh.seek(self.offset)
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # being written
                self.offset += len(line)
                if not line.strip():
                    continue
                try:
                    out.append(event_from_dict(json.loads(line)))
                except (ValueError, TypeError, RecursionError) as exc:
                    if isinstance(exc, RecursionError):
                        exc = ValueError("its brackets nest too deeply to read")
                    if not self._warned:
                        self._warned = True
                        out.append(
                            LogMessage(
                                step=0,
                                level="warning",
                                message=f"{self.events_path} has a damaged line ({exc}); it is "
                                "skipped, the rest of the run is shown.",
                            )
                        )
        return out


def open_reader(path: str) -> TrlRunReader | EventsFileReader:
    """The reader for the run folder at `path`; ValueError when it is none."""
    kind = run_folder_kind(path)
    if kind == TRL:
        return TrlRunReader(path)
    if kind == APP:
        return EventsFileReader(path)
    raise ValueError(
        f"{path} is not a run folder: it has no events.jsonl (a GRPO Desktop run), no "
        "trainer_state.json, checkpoint-N/trainer_state.json or completions/*.parquet (a TRL "
        "output_dir), and no session.json (a session). Choose the folder the training wrote."
    )
