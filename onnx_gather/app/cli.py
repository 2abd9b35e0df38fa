"""The ``onnx-gather`` command line: its commands (each declares its options beside its run: ``app.command``) and
how a run ends. Exit codes: 0 success, 1 a check failed, 2 bad input (one line on stderr), 3 an internal error,
4 a backend asked for could not run (too little compared), 130 interrupted, 141 the output's reader went away."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from onnx_gather.app import demo, documents, options
from onnx_gather.app.command import BROKEN_PIPE, INCOMPLETE, Command
from onnx_gather.app.model_commands import CheckCommand, ConvertCommand, LowerCommand
from onnx_gather.app.parity_command import ParityCommand
from onnx_gather.app.parser import build_parser
from onnx_gather.app.progress import Progress
from onnx_gather.app.reduce_command import ReduceCommand
from onnx_gather.app.run_command import RunCommand
from onnx_gather.core.errors import UserError
from onnx_gather.core.words import one_line
from onnx_gather.directml import install
from onnx_gather.directml.layout import Layout
from onnx_gather.runtime.backends import CannotRun


class DemoCommand(Command):
    name = "demo"
    help = "the bundled sample model on every backend, real DirectML included where it is set up"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        options.add_out_of_bounds_option(parser)

    def run(self, args: argparse.Namespace) -> int:
        return demo.run_demo(sys.stdout, args.out_of_bounds)


class DocsCommand(Command):
    name = "docs"
    help = "print a document installed with onnx-gather (without NAME: list them, with their paths)"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name", nargs="?", metavar="NAME", help="the document, e.g. semantics")

    def run(self, args: argparse.Namespace) -> int:
        return documents.show(args.name, sys.stdout)


class SetupDirectmlCommand(Command):
    name = "setup-directml"
    help = "prepare real DirectML on this Linux machine (Wine, Mesa's lavapipe; as root)"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="only say whether real DirectML is ready, and which versions it uses"
        )

    def run(self, args: argparse.Namespace) -> int:
        layout = Layout.default()
        if args.check:
            return install.check_setup(layout, sys.stdout)
        try:
            return install.setup(layout, sys.stdout)
        except install.SetupError as error:
            for line in str(error).splitlines():
                print(f"onnx-gather: setup-directml: {line}", file=sys.stderr)
            return 2


COMMANDS: tuple[Command, ...] = (
    DemoCommand(),
    DocsCommand(),
    SetupDirectmlCommand(),
    ConvertCommand(),
    LowerCommand(),
    CheckCommand(),
    RunCommand(),
    ParityCommand(),
    ReduceCommand(),
)
_BY_NAME = {command.name: command for command in COMMANDS}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 success, 1 a check failed, 2 bad input, 3 an internal error,
    4 a backend asked for could not run, 130 interrupted, 141 the output's reader went away)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        args = build_parser(COMMANDS).parse_args(argv)
        return _BY_NAME[args.command].run(args)
    except KeyboardInterrupt:  # what was started (Wine, Xvfb) has been ended on the way out
        Progress(0, sys.stderr).clear()
        print("onnx-gather: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): nothing more to say, to anyone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes it
        return BROKEN_PIPE
    except CannotRun as error:  # nothing compared: neither a difference nor bad input
        print(f"onnx-gather: cannot run: {one_line(error, typed=False)}", file=sys.stderr)
        return INCOMPLETE
    except (UserError, OSError) as error:  # bad input (a file one cannot read too): one line naming it
        if debug:
            traceback.print_exc()
        text = one_line(error, typed=False)
        if isinstance(error, OSError) and error.filename is None:  # "[Errno 28] No space left on device": say where
            command = next((word for word in argv if word in _BY_NAME), "onnx-gather")
            text = f"{command}: {error.strerror or text} (on a file the system did not name; --debug shows where)"
        print(f"onnx-gather: error: {text}", file=sys.stderr)
        return 2
    except Exception as error:  # onnx-gather's own failure: one line saying so
        if debug:
            traceback.print_exc()
        hint = "" if debug else "; run with --debug for the traceback"
        print(f"onnx-gather: internal error: {one_line(error)}{hint}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
