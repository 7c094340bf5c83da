"""`grpo-desktop export SOURCE --format adapter|merged|gguf|trl --out DIR`: a run for everyday use.

A thin layer over `engine.export.pipeline.export`. A session folder (NAME.grpo) is resolved here
to its run folder (adapter, merged, gguf) or its settings (trl), since the engine does not read
the session layer. Progress goes to stderr, one JSON summary line to stdout (format, out, bytes,
seconds, dtype, step, ...). Bad input (no checkpoint, a missing base model, an out folder that is
not empty without --force, one that is or holds the source run or session, a full disk) is a
one-paragraph message and exit 2. A TRL project carries code from elsewhere (a custom checker, a
model's own code) only once trusted: --trust-checker, --trust-remote-code (--without-checker
exports without the checker); its train.py asks again where the code is not trusted.

    grpo-desktop export runs/demo --format merged --out exports/demo-merged
    grpo-desktop export my-run.grpo --format gguf --outtype q8_0 --out exports/q8
    grpo-desktop export my.json --format trl --out trl-project
    grpo-desktop export my-run.grpo --format gguf     (into "my-run exports/", beside it)
"""

from __future__ import annotations

import json
import os
import sys

from grpo_desktop.cli.common import EXIT_OK, fail, remote_code_gate


def add_parser(sub) -> None:
    x = sub.add_parser(
        "export",
        help="export a run for everyday use: a LoRA adapter, a merged model, GGUF (llama.cpp, "
        "Ollama, LM Studio) or a TRL project; one JSON line",
    )
    x.add_argument(
        "source",
        metavar="RUN|SESSION|CONFIG",
        help="a run folder, a checkpoint folder, a session (NAME.grpo) or, for --format trl, "
        "a settings JSON",
    )
    x.add_argument(
        "--format",
        required=True,
        choices=("adapter", "merged", "gguf", "trl"),
        help="adapter: the PEFT LoRA folder; merged: the whole model (transformers); gguf: one "
        ".gguf file and an Ollama Modelfile; trl: a TRL + accelerate project",
    )
    x.add_argument(
        "--out",
        metavar="DIR",
        help="the folder to write (new or empty); default: a new one in '<name> exports' beside "
        "the session, run or settings file",
    )
    x.add_argument(
        "--checkpoint", type=int, metavar="STEP", help="the checkpoint's step (default: the newest)"
    )
    x.add_argument(
        "--outtype", choices=("f16", "q8_0"), default="f16", help="GGUF weights (default f16)"
    )
    x.add_argument(
        "--force", action="store_true", help="replace what the --out folder holds (at the end)"
    )
    x.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow the model's own Python code when the run's config sets "
        "model.trust_remote_code, and remember it as trusted",
    )
    x.add_argument(
        "--trust-checker",
        action="store_true",
        help="--format trl: export the custom checker code of a session or settings file from "
        "elsewhere into the project, and remember it as trusted (read it first)",
    )
    x.add_argument(
        "--without-checker",
        action="store_true",
        help="--format trl: leave a custom checker that is not trusted out of the project",
    )
    x.add_argument("--quiet", action="store_true", help="no progress on stderr")
    x.set_defaults(handler=cmd_export)


def _source(args):
    """(what the engine exports, the run folder or None) for the command's source."""
    from grpo_desktop.session.document import SessionError, is_session, load_session

    if is_session(args.source):
        try:
            doc = load_session(args.source)
        except SessionError as exc:
            raise _Bad(str(exc)) from None
        if args.format == "trl":
            return doc.config, None
        if not os.path.isdir(doc.run_dir):
            raise _Bad(
                f"The session {args.source} has not trained yet (no run folder), so there is "
                "nothing to export but its settings: --format trl."
            )
        return doc.run_dir, doc.run_dir
    if not os.path.exists(args.source):
        raise _Bad(
            f"{args.source} does not exist: give a run folder, a session or a settings file."
        )
    return args.source, args.source if os.path.isdir(args.source) else None


def _session_folder(source: str) -> tuple[str, ...]:
    """The session folder the export must not write into (the engine guards the run itself)."""
    from grpo_desktop.session.document import is_session

    return (source,) if is_session(source) else ()


class _Bad(Exception):
    pass


def _default_out(args, step: int | None) -> str:
    """Where the export goes without --out: a new folder in '<name> exports' beside the source
    (engine/export/location.py), said on stderr."""
    from grpo_desktop.engine.export.location import default_export_dir

    out = default_export_dir(args.source, args.format, step, args.outtype)
    print(f"grpo-desktop: no --out given, so the export goes into {out}", file=sys.stderr)
    return out


def _progress(quiet: bool):
    if quiet:
        return None
    last = [""]

    def show(fraction: float, message: str) -> None:
        if message and message != last[0]:
            last[0] = message
            print(f"[{fraction * 100:3.0f}%] {message}", file=sys.stderr, flush=True)

    return show


def _trl_trust(args, source, run_dir, protect):
    """(what to export, the folders to protect, refusal, note) for a TRL project: code from
    elsewhere goes into it only once trusted, as it would run wherever the project trains. A
    custom checker not trusted here is refused (--trust-checker trusts it, --without-checker
    leaves it out and `note` says so); the model's own code (model.trust_remote_code) is refused
    until trusted (--trust-remote-code). Refused: nothing is written or remembered."""
    from grpo_desktop.engine.export.plan import plan_export
    from grpo_desktop.session.trust import TrustStore

    cfg = plan_export(source, "trl").cfg
    code = cfg.rewards.custom_checker
    store = TrustStore()
    note = ""
    if code.strip() and not store.is_trusted(code) and not args.trust_checker:
        if not args.without_checker:
            refusal = (
                f"{args.source} includes custom checker code (Python that would run with your "
                "permissions wherever the project trains) that you have not trusted here, so "
                "nothing was exported. Read it first (config → rewards → custom_checker, or "
                "open it in the app, which shows it); to export it, add --trust-checker "
                "(remembered for this exact code), or add --without-checker to export the "
                "project without it."
            )
            return source, protect, refusal, note
        cfg = cfg.replace(rewards={"custom_checker": ""})
        if run_dir:  # the run folder stays guarded once the settings are passed instead
            protect = (*protect, run_dir)
        source = cfg
        note = (
            f"{args.source}'s custom checker is not trusted here, so the project was exported "
            "without it: its rewards leave out the checker's part."
        )
    refusal, _ = remote_code_gate(cfg, args.source, None, args.trust_remote_code)
    if not refusal and args.trust_checker:
        store.trust(code)
    return source, protect, refusal, note


def cmd_export(args) -> int:
    from grpo_desktop.engine.errors import UserError
    from grpo_desktop.engine.export.pipeline import export, plan_export

    try:
        source, run_dir = _source(args)
        remote_code, note = None, ""
        protect = _session_folder(args.source)
        if args.format == "trl":
            source, protect, refusal, note = _trl_trust(args, source, run_dir, protect)
            if refusal:
                return fail(refusal)
        else:
            plan = plan_export(source, args.format, args.checkpoint, args.outtype)
            folders = [] if plan.is_adapter else [plan.weights]
            refusal, remote_code = remote_code_gate(
                plan.cfg, args.source, run_dir, args.trust_remote_code, folders
            )
            if refusal:
                return fail(refusal)
        out = args.out or _default_out(args, None if args.format == "trl" else plan.step)
        result = export(
            source,
            args.format,
            out,
            checkpoint=args.checkpoint,
            outtype=args.outtype,
            force=args.force,
            progress=_progress(args.quiet),
            remote_code=remote_code,
            protect=protect,
        )
    except _Bad as exc:
        return fail(str(exc))
    except UserError as exc:
        return fail(str(exc))
    if note:
        print(f"grpo-desktop: {note}", file=sys.stderr)
        result["left_out"] = ["rewards.custom_checker"]
    print(json.dumps(result))
    return EXIT_OK
