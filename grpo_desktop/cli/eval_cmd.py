"""`grpo-desktop eval --demo | RUN_DIR | MODEL_DIR`: held-out accuracy as one JSON line.
With --compare, a before/after comparison of two of a run's models (cli/compare_cmd.py).

A model's own code (model.trust_remote_code: in a run's config, or --trust-remote-code for a
plain model folder) runs only once trusted: --trust-remote-code allows and remembers it."""

from __future__ import annotations

from grpo_desktop.cli.common import EXIT_OK, fail, remote_code_gate


def cmd_eval(args) -> int:
    import json

    from grpo_desktop.engine.errors import UserError

    if args.compare is not None:
        from grpo_desktop.cli.compare_cmd import cmd_compare

        return cmd_compare(args)
    given = [f"--{n}" for n in ("against", "table", "problems") if getattr(args, n) is not None]
    if given:
        return fail(f"{', '.join(given)} only go with --compare (e.g. --compare base).")
    if args.demo == bool(args.target):
        return fail("give either a model or run folder, or --demo.")
    from grpo_desktop.engine.variants.eval_target import evaluate_target, target_config

    target = None if args.demo else args.target
    try:
        cfg, _adapter, weights, _step = target_config(target, args.trust_remote_code)
        folders = [weights] if weights else []  # a checkpoint's full weights and tokenizer
        refusal, remote_code = remote_code_gate(cfg, target, None, args.trust_remote_code, folders)
        if refusal:
            return fail(refusal)
        result = evaluate_target(
            target,
            n=args.n,
            seed=args.seed,
            sample_t1=not args.no_sample,
            remote_code=remote_code,
            trust_remote_code=args.trust_remote_code,
        )
    except UserError as exc:
        return fail(str(exc))
    print(json.dumps(result))
    return EXIT_OK
