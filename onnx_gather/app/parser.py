"""The ``onnx-gather`` command line's parser: the commands, each declaring its own options (``app.command``), and
how option values are checked."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import NoReturn

from onnx_gather.app.command import Command
from onnx_gather.core.errors import UserError


class UsageError(UserError):
    """Bad arguments: exit 2 with one line."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # A value such as ``-90:160`` (``--int-range``) is a value, as ``-3`` is, not an unknown option.
        self._negative_number_matcher = re.compile(r"^-\d+(:-?\d+)?$|^-\d*\.\d+$")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def number(kind: type, low: float, what: str) -> Callable[[str], float]:
    """An argparse type: a ``kind`` of at least ``low`` (argparse names the flag in the error)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value

    return parse


def _version() -> str:
    try:
        return metadata.version("onnx-gather")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    """The parser of ``commands``: each parsed into its own options, ``command`` naming it."""
    common = argparse.ArgumentParser(add_help=False)  # options every command takes, before or after its name
    common.add_argument("--debug", action="store_true", help="print a traceback with any error")
    parser = _Parser(
        prog="onnx-gather",
        parents=[common],
        description="DirectML's Gather, GatherElements and GatherND semantics for ONNX models.",
    )
    parser.add_argument("--version", action="version", version=f"onnx-gather {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for command in commands:
        command.declare(
            subparsers.add_parser(
                command.name, parents=[common], help=command.help, description=command.description or None
            )
        )
    return parser
