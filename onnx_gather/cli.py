"""The ``onnx-gather`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onnx_gather import demo


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-gather", description="DirectML's Gather and GatherElements semantics for ONNX models."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("demo", help="run DirectML's documented examples through the custom ops in ONNX Runtime")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 success, 1 a check failed, 2 bad input)."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return demo.run(sys.stdout)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
