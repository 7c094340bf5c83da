"""Running training: the worker thread and its state machine, the run controls (Start/Pause/Stop, progress), the log view, device and memory info."""
