"""Bad input, told apart from internal failures, for every CLI (exit status: 0 the job ran, 2 bad input or usage,
1 an internal failure; 3 the job ran and what it checks does not hold, where a CLI gates CI on a finding).

The loaders name what is wrong (the file, the line or key, what was expected) and raise InputError (DataError,
CheckpointError, TaskError, TableError are kinds of it) or FileNotFoundError. run_cli turns those into one line on
stderr and exit status 2, as argparse does for a bad flag; anything else is a bug and keeps its traceback (exit 1).
The CLIs check their inputs before they write anything, so a refused run leaves its --out as it was."""
from __future__ import annotations

import os
import sys

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2
EXIT_READER_GONE = 141  # stdout's reader closed early (`| head`): 128 + SIGPIPE, what a shell reports for C tools
EXIT_FINDING = 3      # a finding, not a failure: answers differ, a world outside its tolerances, not certified


class InputError(ValueError):
    """Input that cannot be used: the message names the file, the line or key, and what was expected."""


BAD_INPUT = (InputError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError)


def run_cli(main, prog: str, argv=None) -> int:
    """main(argv) with bad input reported as `prog: error: <message>` (a line per problem where a loader listed
    several, as audit.certify does) and exit status 2."""
    try:
        rc = main(argv)
    except BAD_INPUT as e:
        for line in [ln for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]:
            print(f"{prog}: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # the reader of stdout went away (`python -m audit.compare A B | head`): neither bad input nor a bug, so no
        # traceback. stdout goes to /dev/null so that Python's own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE
    return EXIT_OK if rc is None else int(rc)
