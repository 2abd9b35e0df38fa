"""The ``onnx-gather`` command line. Exit codes: 0 success, 1 a check failed, 2 bad input (one line on stderr)."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from onnx_gather import demo, model_io
from onnx_gather.check import FEATURE_LEVELS, check
from onnx_gather.convert import Report, convert
from onnx_gather.lower import lower
from onnx_gather.semantics import OUT_OF_BOUNDS_MODES, GatherError


class UsageError(Exception):
    """Bad arguments: exit 2 with one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="onnx-gather", description="DirectML's Gather and GatherElements semantics for ONNX models.")
    parser.add_argument("--debug", action="store_true", help="print a traceback with any error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    commands.add_parser("demo", help="convert the bundled sample model and run it with the custom ops and natively")

    convert_command = commands.add_parser("convert", help="standard Gather/GatherElements into DML custom ops")
    convert_command.add_argument("model", help="the ONNX model to convert (never modified)")
    convert_command.add_argument("-o", "--output", required=True, help="where to write the converted model")
    convert_command.add_argument(
        "--dimension-count", default="auto", help="N for every DML node: auto (the least each needs) or 1 to 8"
    )
    convert_command.add_argument("--out-of-bounds", choices=OUT_OF_BOUNDS_MODES, default="clamp")
    convert_command.add_argument("--strict", action="store_true", help="exit 1 if any gather stays standard")

    lower_command = commands.add_parser("lower", help="DML custom ops back into standard ONNX")
    lower_command.add_argument("model", help="the ONNX model to lower (never modified)")
    lower_command.add_argument("-o", "--output", required=True, help="where to write the lowered model")

    check_command = commands.add_parser("check", help="would DirectML at a feature level accept every gather?")
    check_command.add_argument("model")
    check_command.add_argument("--feature-level", choices=FEATURE_LEVELS, default="4.1")
    return parser


def _print_report(report: Report, verb: str, source: str, target: str) -> None:
    print(f"{source} -> {target}")
    ops = sorted(set(report.before) | set(report.after), key=lambda op: (-report.before[op], op))
    width = max([len(op) for op in ops] + [2])
    print(f"  {'op':<{width}} {'before':>7} {'after':>7}")
    for op in ops:
        if report.before[op] != report.after[op]:
            print(f"  {op:<{width}} {report.before[op]:>7} {report.after[op]:>7}")
    unchanged = sum(1 for op in ops if report.before[op] == report.after[op])
    print(f"  ({unchanged} other op types unchanged; {sum(report.before.values())} nodes before, "
          f"{sum(report.after.values())} after)")  # fmt: skip
    total = len(report.changed) + len(report.left)
    print(f"{verb} {len(report.changed)} of {total} gathers.")
    for changed in report.changed:
        if changed.note:
            print(f"  node {changed.node!r}: {changed.note}")
    for left in report.left:
        print(f"  left as it was: node {left.node!r} ({left.op_type}, {left.where}): {left.reason}")


def _convert(args: argparse.Namespace) -> int:
    model = model_io.load(args.model)
    result, report = convert(model, args.dimension_count, args.out_of_bounds)
    model_io.save(result, args.output, args.model)
    _print_report(report, "Converted", args.model, args.output)
    return 1 if args.strict and report.left else 0


def _lower(args: argparse.Namespace) -> int:
    model = model_io.load(args.model)
    result, report = lower(model)
    model_io.save(result, args.output, args.model)
    _print_report(report, "Lowered", args.model, args.output)
    return 1 if report.left else 0


def _check(args: argparse.Namespace) -> int:
    verdicts = check(model_io.load(args.model), args.feature_level)
    for verdict in verdicts:
        mark = "ok     " if verdict.accepted else "REFUSED"
        print(f"{mark} node {verdict.node!r} ({verdict.op_type}, {verdict.where}): {verdict.reason}")
    refused = sum(not v.accepted for v in verdicts)
    print(
        f"{len(verdicts) - refused} of {len(verdicts)} gathers accepted at DirectML feature level {args.feature_level}."
    )
    return 1 if refused else 0


_COMMANDS = {"demo": lambda args: demo.run(sys.stdout), "convert": _convert, "lower": _lower, "check": _check}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 success, 1 a check failed, 2 bad input)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args(argv)
        return _COMMANDS[args.command](args)
    except (UsageError, model_io.ModelError, GatherError, ValueError, OSError) as error:
        if debug:
            traceback.print_exc()
        print(f"onnx-gather: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
