"""What this computer offers and uses: the device probe, memory in use, cached hub models.

- `DeviceProbe` asks a child Python process (QProcess: no GIL shared, no torch import in the GUI
  process at start) whether PyTorch sees a CUDA GPU, its name, memory (total, and free at
  launch) and the properties the estimate's speed needs (the estimate child then asks CUDA
  nothing: the probe's context ends with it); CPU name and RAM come from the operating system.
  The result is a dict (see `_PROBE`).
- `memory_in_use()` is this process's resident memory, plus GPU memory when torch is loaded and
  CUDA is initialised (the training thread imports torch, never the GUI thread).
- `cached_models()` lists models in the local Hugging Face hub cache (a directory scan);
  `local_models()` the GGUF models Ollama and LM Studio keep (engine/models/local_models.py:
  their manifests and folders, each file's header only), with what could not be read.
"""

from __future__ import annotations

import json
import os
import platform
import sys

from PySide6.QtCore import QObject, QProcess, Signal

from grpo_desktop.engine.units import size_text

_PROBE = r"""
import json, os
info = {"cuda": False, "gpu_name": "", "gpu_memory": 0, "torch": ""}
try:
    import torch
    info["torch"] = torch.__version__
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(cuda=True, gpu_name=p.name, gpu_memory=p.total_memory)
        keys = ("major", "minor", "multi_processor_count", "clock_rate", "memory_clock_rate",
                "memory_bus_width")
        info["gpu_props"] = {k: getattr(p, k) for k in keys if hasattr(p, k)}
        info["gpu_free"] = torch.cuda.mem_get_info(0)[0]
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def host_info() -> dict:
    """What needs no probe: CPU name, cores, RAM."""
    return {"cpu_name": cpu_name(), "cpu_count": os.cpu_count() or 1, "ram": total_ram()}


def describe_device(info: dict) -> str:
    """One line for the status bar and the model panel."""
    if info.get("cuda"):
        memory = size_text(info.get("gpu_memory", 0), unit="GB")
        return f"GPU: {info.get('gpu_name', 'CUDA')} · {memory} VRAM"
    cpu = f"CPU: {info.get('cpu_count', '?')} cores"
    ram = f" · {size_text(info['ram'], unit='GB')} RAM" if info.get("ram") else ""
    return cpu + ram


class DeviceProbe(QObject):
    """Runs the probe child once; emits `probed(dict)`. Call `stop()` before quitting."""

    probed = Signal(object)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.info = host_info()
        self._proc = QProcess(self)
        self._proc.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        self._proc.finished.connect(self._on_proc_finished)
        self._proc.errorOccurred.connect(self._on_proc_error_occurred)

    def start(self) -> None:
        self._proc.start(sys.executable, ["-c", _PROBE])

    def stop(self) -> None:
        if self._proc.state() != QProcess.ProcessState.NotRunning:
            self._proc.kill()
            self._proc.waitForFinished(2000)

    def _on_proc_finished(self, *_args) -> None:
        out = bytes(self._proc.readAllStandardOutput()).decode(errors="replace").strip()
        try:
            self.info.update(json.loads(out.splitlines()[-1]))
        except (ValueError, IndexError):
            self.info["error"] = "the device probe gave no answer"
        self.info["probed"] = True
        self.probed.emit(dict(self.info))

    def _on_proc_error_occurred(self, error) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self.info.update(probed=True, error="the device probe could not start")
            self.probed.emit(dict(self.info))


def memory_in_use() -> str:
    """'RAM 1.2 GB' (this process), plus ' · VRAM 3.4 GB' once CUDA is in use."""
    rss = 0
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource

            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except (ImportError, OSError):
            rss = 0
    text = f"RAM {size_text(rss, unit='GB')}" if rss else "RAM ?"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                text += f" · VRAM {size_text(torch.cuda.memory_reserved(), unit='GB')}"
        except Exception:  # a half-imported torch, or a driver problem: just show RAM
            pass
    return text


def hub_cache_dir() -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return os.path.join(home, "hub")


def cached_models(cache_dir: str | None = None) -> list[str]:
    """Hub ids of the models in the local cache that have a config.json in some snapshot."""
    root = cache_dir or hub_cache_dir()
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.startswith("models--"):
            continue
        snapshots = os.path.join(root, entry, "snapshots")
        try:
            revisions = os.listdir(snapshots)
        except OSError:
            continue
        if any(os.path.isfile(os.path.join(snapshots, r, "config.json")) for r in revisions):
            found.append(entry[len("models--") :].replace("--", "/"))
    return found


def local_models():
    """(models, skipped, problems): the models Ollama and LM Studio keep on this computer, the
    (path, reason) of each entry that could not be read (a broken manifest, a missing blob), and
    {path: why} for the listed ones that cannot be trained (an architecture or a quantization
    transformers' GGUF loader does not read; engine/models/gguf_import.check_supported)."""
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.engine.models.gguf_import import check_supported
    from grpo_desktop.engine.models.gguf_info import read_gguf_info
    from grpo_desktop.engine.models.local_models import find_local_models

    skipped: list[tuple[str, str]] = []
    models = find_local_models(skipped)
    problems = {}
    for m in models:
        try:
            check_supported(read_gguf_info(m.path))
        except UserError as exc:
            problems[m.path] = str(exc)
    return models, skipped, problems
