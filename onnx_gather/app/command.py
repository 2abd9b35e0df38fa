"""What a command of the command line is: its name and help, the options it declares and its run, side by side
(as Polygraphy's ``Tool`` classes are)."""

from __future__ import annotations

import argparse

# A backend asked for could not run here or could not take the model, so too little was compared to pass (exit 1 is
# a difference or a failure, 2 bad input, 3 onnx-gather's own error, 130 interrupted).
INCOMPLETE = 4
BROKEN_PIPE = 141  # the output's reader went away (`| head`), as a shell reports a process ended by SIGPIPE


class Command:
    """One command: ``declare`` adds its options to its parser, ``run`` does it with the parsed options and returns
    the exit code (0 success, 1 a check failed, ``INCOMPLETE``; bad input raises ``UserError``, a backend that cannot
    run ``backends.CannotRun``)."""

    name = ""
    help = ""
    description = ""  # the command's own --help opens with it; "" for none

    def declare(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's options to ``parser``."""

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError
