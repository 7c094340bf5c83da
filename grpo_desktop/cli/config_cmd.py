"""`grpo-desktop config [--demo | --preset NAME]`: print a config as JSON for editing."""

from __future__ import annotations

from grpo_desktop.cli.common import EXIT_OK


def cmd_config(args) -> int:
    from grpo_desktop.engine.config import preset
    from grpo_desktop.engine.config.demo import demo_config

    cfg = demo_config()
    if args.preset:
        cfg = preset(args.preset, cfg)
    print(cfg.to_json())
    return EXIT_OK
