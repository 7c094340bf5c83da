"""The export's background job: `engine.export.pipeline.export` off the GUI thread, with progress
and Cancel.

`ExportRunner.start(source, fmt, out_dir, **options)` (a `JobRunner`, ui/common/job_thread.py)
runs one export in its own QThread; `progressed(fraction, message)` reports as it goes,
`succeeded(summary)` or `failed(message, details)` says how it ended (a UserError's message, or
"internal error" with the traceback as details), then `finished`. `cancel()` asks the engine to
stop between stages (nothing is left behind); `close()` cancels and waits, so the dialog leaves
no thread behind when it closes. Qt-only glue; the work is the engine's.

Try it: tests/ui/export/test_export.py.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import Signal

from grpo_desktop.ui.common.job_thread import JobRunner, JobWorker


class ExportWorker(JobWorker):
    """Lives in the job's thread; `work()` runs the export."""

    progressed = Signal(float, str)
    succeeded = Signal(dict)

    doing = "The export"

    def __init__(self, source, fmt: str, out_dir: str, cancel: threading.Event, **options):
        super().__init__(cancel)
        self.source, self.fmt, self.out_dir, self.options = source, fmt, out_dir, options

    def work(self) -> None:
        from grpo_desktop.engine.export.pipeline import export

        summary = export(
            self.source,
            self.fmt,
            self.out_dir,
            progress=lambda fraction, message: self.progressed.emit(fraction, message),
            cancel=self.cancel_event.is_set,
            **self.options,
        )
        self.succeeded.emit(summary)


class ExportRunner(JobRunner):
    """One export at a time; forwards its progress and how it ended."""

    progressed = Signal(float, str)
    succeeded = Signal(dict)

    thread_name = "grpo-export"
    busy_message = "An export is already running."

    def start(self, source, fmt: str, out_dir: str, **options) -> None:
        worker = ExportWorker(source, fmt, out_dir, self.cancel_event, **options)
        worker.progressed.connect(self.progressed)
        worker.succeeded.connect(self.succeeded)
        self._launch(worker)
