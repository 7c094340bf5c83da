"""`grpo-desktop config [--demo | --preset NAME]`: print a config as JSON for editing.

The built-in demo's settings, optionally switched to a named algorithm variant (grpo, dr_grpo,
dapo, gspo), as the JSON that `train`, `score`, `estimate` and `export` read back.

    grpo-desktop config --demo > my.json
    grpo-desktop config --preset dapo > dapo.json
"""

from __future__ import annotations

from grpo_desktop.cli.common import EXIT_OK


def add_parser(sub) -> None:
    """The `config` subcommand's arguments (called by the dispatcher)."""
    c = sub.add_parser("config", help="print a config as JSON for editing")
    c.add_argument("--demo", action="store_true", help="the built-in demo's config (default)")
    c.add_argument("--preset", choices=["grpo", "dr_grpo", "dapo", "gspo"], help="a named variant")
    c.set_defaults(handler=cmd_config)


def cmd_config(args) -> int:
    from grpo_desktop.engine.config import preset
    from grpo_desktop.engine.config.demo import demo_config

    cfg = demo_config()
    if args.preset:
        cfg = preset(args.preset, cfg)
    print(cfg.to_json())
    return EXIT_OK
