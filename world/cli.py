"""What the world/ CLIs share on their command lines: a parser whose errors are one line (`prog: error: ...`, exit
status 2, as rlhf.errors.run_cli reports bad input) rather than a usage block and then the error; argparse types
for comma-separated seeds and counts built on rlhf.common's (seed_arg, positive_int); and the check, before any
work, that an output file can be written where it was asked for."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlhf.common import positive_int, seed_arg
from rlhf.errors import EXIT_BAD_INPUT, InputError


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are `prog: error: message`, one line per line of the message, and
    exit status 2, without the usage block (--help prints it). Sub-parsers made with add_subparsers inherit it."""

    def error(self, message):
        for line in [ln for ln in str(message).splitlines() if ln.strip()] or ["bad usage (see --help)"]:
            sys.stderr.write(f"{self.prog}: error: {line}\n")
        sys.exit(EXIT_BAD_INPUT)


def _list_of(kind, what: str):
    def parse(text) -> list:
        items = [s.strip() for s in str(text).split(",")]
        if not any(items):
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
        out = []
        for s in items:
            try:
                out.append(kind(s))
            except argparse.ArgumentTypeError as e:
                raise argparse.ArgumentTypeError(f"{s!r} of {text!r}: {e}") from None
        return out
    parse.__name__ = f"{what.replace(' ', '_')}"
    return parse


seed_list = _list_of(seed_arg, "seeds")            # e.g. --seeds 0,1,2: each in [0, 2**32 - 1]
count_list = _list_of(positive_int, "integers >= 1")   # e.g. --gold 100,50,25


def check_output_file(path, flag: str) -> None:
    """Refuse (InputError: exit 2), before any work, an output file that could only fail to be written at the end:
    a path that is a directory, or whose parent is a file."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag} {p}: is a directory; expected the path of a file to write")
    parent = next((q for q in p.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise InputError(f"{flag} {p}: {parent} is a file, not a directory")
