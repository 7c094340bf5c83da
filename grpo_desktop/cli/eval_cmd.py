"""`grpo-desktop eval --demo | RUN_DIR | MODEL_DIR`: held-out accuracy as one JSON line."""

from __future__ import annotations

from grpo_desktop.cli.common import EXIT_OK, fail


def cmd_eval(args) -> int:
    import json

    from grpo_desktop.engine.errors import UserError

    if args.demo == bool(args.target):
        return fail("give either a model or run folder, or --demo.")
    from grpo_desktop.engine.eval_target import evaluate_target

    try:
        result = evaluate_target(
            None if args.demo else args.target,
            n=args.n,
            seed=args.seed,
            sample_t1=not args.no_sample,
        )
    except UserError as exc:
        return fail(str(exc))
    print(json.dumps(result))
    return EXIT_OK
