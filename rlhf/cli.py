"""What every CLI shares on its command line, torch-free (the samples door imports it before its checks):
a parser whose errors are one line (`prog: error: ...`, exit status 2, as rlhf.errors.run_cli reports bad input)
rather than a usage block and then the error; argparse types for seeds, counts and rates (and comma-separated lists
of them); and a checker that holds config dataclasses to the same types (rlhf.atomic checks output paths). Bad
values exit 2 before anything is written."""
from __future__ import annotations

import argparse
import math
import numbers
import sys

from .errors import EXIT_BAD_INPUT, InputError

SEED_MAX = 2**32 - 1     # every generator we seed (torch, numpy, Python) takes it; seed + k offsets stay in int64


def _number(kind, text):
    try:
        v = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") \
            from None
    return v


def seed_arg(text) -> int:
    """argparse type for --seed: an integer in [0, 2**32 - 1]."""
    v = _number(int, text)
    if not 0 <= v <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"a seed is an integer in [0, {SEED_MAX}], got {text}")
    return v


def positive_int(text) -> int:
    v = _number(int, text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return v


def nonneg_int(text) -> int:
    """A count that may be 0 (extra batches, a checkpoint interval where 0 means none)."""
    v = _number(int, text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return v


def positive_float(text) -> float:
    """A finite number > 0 (learning rates, temperatures, ratios)."""
    v = _number(float, text)
    if not 0 < v < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return v


def nonneg_float(text) -> float:
    """A finite number >= 0 (KL coefficients, margins)."""
    v = _number(float, text)
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return v


_INTEGER_CHECKS = (seed_arg, positive_int, nonneg_int)


def check_fields(cfg, where: str, rules: dict, allow_none=True) -> None:
    """Refuse a config whose fields break `rules` {field: checker}, the checkers being the argparse types above:
    a config from a file or --override then never starts a run that would crash later or train on NaN. Every bad
    key is named, one line each (InputError: exit 2). A field that is None passes where `allow_none` says so: True
    (every field; the caller checks what None means), a collection of field names, or False (none)."""
    bad = []
    for name, check in rules.items():
        v = getattr(cfg, name)
        want_int = check in _INTEGER_CHECKS
        if v is None and (allow_none is True or (allow_none and name in allow_none)):
            continue
        # numbers.Integral / numbers.Real: numpy's integers and floats too (never bool, nor numpy's bool_)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral if want_int else numbers.Real):
            bad.append(f"key {name!r}: expected {'an integer' if want_int else 'a number'}, got {v!r}")
            continue
        try:
            check(v)
        except argparse.ArgumentTypeError as e:
            bad.append(f"key {name!r}: {e}")
    if bad:
        raise InputError("\n".join(f"{where}: {b}" for b in bad))


def first_paragraph(doc: str | None) -> str:
    """A module docstring's first paragraph as one line: a command's --help description, whole sentences (its
    first line alone stops mid-sentence)."""
    para = (doc or "").strip().split("\n\n")[0]
    return " ".join(para.split())


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
