"""The training engine: config, data, rewards, GRPO math, model loading and the training loop.

Never imports Qt. Import submodules directly (`from grpo_desktop.engine.grpo.trainer import train`) so that
torch-free parts (config, events) stay fast to import.
"""
