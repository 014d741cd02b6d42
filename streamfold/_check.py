"""`streamfold check [FILE|-]`: judge a recorded Responses stream against the rules.

Wiring into the `streamfold` console script:

    from streamfold._check import add_check_parser, run_check
    add_check_parser(subparsers)       # registers `check`, sets `run=run_check`
    ...
    return args.run(args)

Exit status: 0 conformant, 1 not conformant, 2 unreadable input (no such file, not JSON, not
a stream). Also runnable alone: `python -m streamfold._check FILE`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
from collections.abc import Iterator
from typing import Any

import attrs

from streamfold._bundled import GOLDEN, resolve
from streamfold.specs._reading import MAX_LINE_BYTES, UnreadableStreamError, check_file
from streamfold.specs._violation import RULES, format_report

__all__ = ["add_check_parser", "main", "run_check"]

EXIT_CONFORMANT = 0
EXIT_VIOLATIONS = 1
EXIT_UNREADABLE = 2

_DESCRIPTION = """\
Check a recorded OpenAI Responses API event stream against streamfold's conformance rules
(specs/README.md, R1-R25). FILE holds the stream as a server sent it (SSE: `event:`/`data:`
lines) or as JSON lines, one event per line; the framing is detected. Reads stdin when FILE is
`-` or left out. Exit status: 0 conformant, 1 violations found, 2 unreadable input.
"""
_EXAMPLES = """\
examples:
  streamfold replay weather_call --format sse | streamfold check -
  streamfold check weather_call        # the golden stream bundled with that trace
  curl -sN localhost:8000/v1/responses -H 'content-type: application/json' \\
    -d '{"model": "weather_call", "input": "hi", "stream": true}' | streamfold check -
"""


def add_check_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `check` subcommand to an argparse `subparsers` object and return its parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="check a recorded Responses event stream for protocol violations",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    parser.set_defaults(run=run_check)
    return parser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help="the recorded stream (SSE or JSON lines), or the name of a bundled trace's golden "
        "stream (e.g. weather_call); '-' or none: stdin",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="report as readable text (default) or as one JSON object",
    )
    parser.add_argument(
        "--max-line-mib",
        type=int,
        default=MAX_LINE_BYTES // 2**20,
        metavar="N",
        help="refuse a line longer than N MiB (default %(default)s); the input "
        "is read line by line, so its length has no limit",
    )


def run_check(args: argparse.Namespace) -> int:
    """Run `streamfold check` with parsed `args`; return the exit status."""
    path = resolve(args.file, GOLDEN)
    name = "<stdin>" if path == "-" else args.file
    limit = args.max_line_mib * 2**20
    try:
        if path == "-":
            if sys.stdin.isatty():
                print(
                    "streamfold check: reading a stream from stdin (end it with Ctrl-D); "
                    "or give the FILE to check",
                    file=sys.stderr,
                )
            with _no_cycle_collector():
                reading, violations = check_file(sys.stdin.buffer, max_line_bytes=limit)
        else:
            with open(path, "rb") as f, _no_cycle_collector():
                reading, violations = check_file(f, max_line_bytes=limit)
    except OSError as exc:
        # strerror, not str(exc): "[Errno 2] No such file or directory: 'x'" repeats the name.
        print(
            f"streamfold check: {name}: cannot read a stream: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_UNREADABLE
    except UnreadableStreamError as exc:
        print(f"streamfold check: {name}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except RecursionError:
        print(f"streamfold check: {name}: an event is nested too deeply to check", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.format == "json":
        print(
            json.dumps(
                {
                    "file": name,
                    "framing": reading.framing,
                    "events": reading.event_count,
                    "truncated": reading.truncated,
                    "conformant": not violations,
                    "violations": [
                        {**attrs.asdict(v), "rule_title": RULES.get(v.rule, "")} for v in violations
                    ],
                }
            )
        )
    else:
        print(f"{name}: {reading.event_count} events read as {reading.framing}")
        if reading.truncated:
            print(
                "note: the input ends inside an SSE event (no closing blank line); that "
                "event was dropped, as SSE clients drop it"
            )
        print(format_report(violations, event_count=reading.event_count), end="")
    return EXIT_VIOLATIONS if violations else EXIT_CONFORMANT


@contextlib.contextmanager
def _no_cycle_collector() -> Iterator[None]:
    """Python's cyclic garbage collector off while a stream is checked (issue 16): the reader
    and the checker build no reference cycles (JSON values, flat records), so reference
    counting frees each batch of events once it is checked, and the collector would only
    scan the batch in flight again and again, about a tenth of `check`'s CPU time on a long
    stream. Restored afterwards, for callers that run `check` inside their own process."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamfold check", description=_DESCRIPTION)
    _add_arguments(parser)
    return run_check(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
