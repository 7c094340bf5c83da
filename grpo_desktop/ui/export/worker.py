"""The export's background thread: `engine.export.pipeline.export` off the GUI thread, with progress and
Cancel.

`ExportThread(source, fmt, out_dir, **options)` runs one export; `progressed(fraction, message)`
reports as it goes, `succeeded(summary)` or `failed(message, details)` says how it ended (a
UserError's message, or "internal error" with the traceback as details), and `cancel()` asks the
engine to stop between stages (nothing is left behind). `stop()` cancels and waits: the dialog
calls it on close so no thread outlives it. Qt-only glue; the work is the engine's.
"""

from __future__ import annotations

import threading
import traceback

from PySide6.QtCore import QThread, Signal


class ExportThread(QThread):
    progressed = Signal(float, str)
    succeeded = Signal(dict)
    failed = Signal(str, str)  # message, details (a traceback for an internal error)

    def __init__(self, source, fmt: str, out_dir: str, parent=None, **options):
        super().__init__(parent)
        self.source, self.fmt, self.out_dir, self.options = source, fmt, out_dir, options
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def stop(self) -> None:
        """Cancel and wait for the thread to end (at the next stage of the export)."""
        self.cancel()
        self.wait()

    def run(self) -> None:
        from grpo_desktop.engine.errors import UserError
        from grpo_desktop.engine.export.pipeline import export

        try:
            summary = export(
                self.source,
                self.fmt,
                self.out_dir,
                progress=lambda fraction, message: self.progressed.emit(fraction, message),
                cancel=self._cancel.is_set,
                **self.options,
            )
        except UserError as exc:
            self.failed.emit(str(exc), "")
        except Exception as exc:  # a bug: shown with its traceback behind Details
            self.failed.emit(
                f"The export failed with an internal error: {exc}", traceback.format_exc()
            )
        else:
            self.succeeded.emit(summary)
