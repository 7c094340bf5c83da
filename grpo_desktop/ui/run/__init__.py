"""Running training: the worker thread and its state machine, the run controls (Start/Pause/Stop,
progress), the log view, the alarm banners, device and memory info.

What lives where: grpo_desktop/ui/README.md.
"""
