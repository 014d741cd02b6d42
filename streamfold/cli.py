"""The `streamfold` command line. Each subcommand's work lives in its own module; this file
only wires them, and imports heavy parts (torch, the server) only for the command that runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from streamfold._bundled import TRACE, bundled_traces, resolve

__all__ = ["main"]

HELP = "streamfold replay --help"


def _add_replay(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay a recorded trace through the reducer and print its events",
        description="Replay a trace (JSON lines: header, token chunks, finish_reason) and print\n"
        "the Responses events it gives. The traces that ship with streamfold, one per bug class\n"
        f"of the peers, are in {bundled_traces()};\n"
        "name one without its directory and '.jsonl' (e.g. weather_call).",
        epilog="examples:\n"
        "  streamfold replay weather_call --format sse | streamfold check -\n"
        "  streamfold replay my_trace.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", help="trace file (.jsonl), or the name of a bundled trace")
    p.add_argument(
        "--format",
        choices=("jsonl", "sse"),
        default="jsonl",
        help="jsonl: one wire-JSON event per line; sse: the HTTP body a server sends",
    )
    p.set_defaults(run=_run_replay)


def _run_replay(args: argparse.Namespace) -> int:
    from streamfold.adapters.grammars import iter_replay
    from streamfold.engines import TraceFormatError, read_trace
    from streamfold.statemachine import StreamfoldError, json_line, sse_event

    path = resolve(args.trace, TRACE)
    try:
        trace = read_trace(path)
        frame = sse_event if args.format == "sse" else json_line
        sys.stdout.flush()
        out = sys.stdout.buffer  # bytes, written in blocks: one text write per event was slow
        block: list[bytes] = []
        try:
            for event in iter_replay(trace, base_dir=Path(path).parent):
                block.append(frame(event))
                if len(block) >= 512:
                    out.write(b"".join(block))
                    block = []
        finally:  # the events before an error are printed too
            out.write(b"".join(block))
    except TraceFormatError as exc:
        hint = ""
        if not Path(path).exists():
            hint = f" (a bundled trace is named without '.jsonl', e.g. weather_call: see {HELP})"
        print(f"streamfold replay: {exc}{hint}", file=sys.stderr)
        return 2
    except StreamfoldError as exc:
        print(f"streamfold replay: {exc}", file=sys.stderr)
        return 1
    return 0


def _add_check(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    try:
        from streamfold._check import add_check_parser
    except ImportError:
        return
    add_check_parser(subparsers)


def _add_serve(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from streamfold._serve import add_serve_parser

    add_serve_parser(subparsers)


def _add_record(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from streamfold._record import add_record_parser

    add_record_parser(subparsers)


def _add_init_model(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from streamfold._init_model import add_init_model_parser

    add_init_model_parser(subparsers)


#: Every subcommand, in the order `streamfold --help` lists them, and what registers it.
_SUBCOMMANDS: dict[str, Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = {
    "check": _add_check,
    "replay": _add_replay,
    "serve": _add_serve,
    "record": _add_record,
    "init-model": _add_init_model,
}


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names (its first argument that is not an option), if any."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in _SUBCOMMANDS else None


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole command line; when `argv` names a subcommand, only that one is built in full.

    Registering a subcommand imports what its options need (the checker's rules, the engine
    registry, the server's limits): a quarter of a second that `streamfold replay` paid before
    reading its first line. The others are then registered by name alone, so a mistyped or
    misplaced name still gets argparse's usual error.
    """
    from streamfold import __version__

    parser = argparse.ArgumentParser(
        prog="streamfold",
        description="Turn an LLM token stream into a correct OpenAI Responses event stream.",
    )
    parser.add_argument("--version", action="version", version=f"streamfold {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    chosen = _chosen(argv)
    for name, add in _SUBCOMMANDS.items():
        if chosen is None or name == chosen:
            add(subparsers)
        else:
            subparsers.add_parser(name)
    return parser


def _show_progress() -> None:
    """On a terminal, say what takes a moment (the first vocabulary unpack, ...)."""
    if not sys.stderr.isatty():
        return
    # Here, not at the top: `streamfold check` imports no logging otherwise (5 ms of its start).
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("streamfold: %(message)s"))
    progress = logging.getLogger("streamfold.progress")
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    progress.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    args = _parser(argv).parse_args(argv)
    _show_progress()
    try:
        return int(args.run(args))
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
