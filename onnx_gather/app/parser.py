"""The ``onnx-gather`` command line's parser: the commands, their options, and how option values are checked."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from importlib import metadata
from typing import NoReturn

from onnx_gather.core.contract import OUT_OF_BOUNDS_MODES
from onnx_gather.core.errors import UserError
from onnx_gather.graphs.convert import PROVIDER_FAILURES
from onnx_gather.graphs.placement import FEATURE_LEVELS
from onnx_gather.runtime import backends


class UsageError(UserError):
    """Bad arguments: exit 2 with one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _number(kind: type, low: float, what: str) -> Callable[[str], float]:
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


def _dimension_count(text: str) -> str | int:
    if text == "auto":
        return text
    if text.isdigit() and 1 <= int(text) <= 8:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: expected auto or 1 to 8 (DirectML tensors have 1 to 8 dimensions)")


def _version() -> str:
    try:
        return metadata.version("onnx-gather")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)  # options every command takes, before or after its name
    common.add_argument("--debug", action="store_true", help="print a traceback with any error")
    parser = _Parser(
        prog="onnx-gather", parents=[common],
        description="DirectML's Gather, GatherElements and GatherND semantics for ONNX models.",
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"onnx-gather {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    commands = functools.partial(subparsers.add_parser, parents=[common])
    demo_command = commands(
        "demo", help="the bundled sample model on every backend, real DirectML included where it is set up"
    )
    _out_of_bounds_option(demo_command)
    docs_command = commands(
        "docs", help="print a document installed with onnx-gather (without NAME: list them, with their paths)"
    )
    docs_command.add_argument("name", nargs="?", metavar="NAME", help="the document, e.g. semantics")
    setup_command = commands(
        "setup-directml", help="prepare real DirectML on this Linux machine (Wine, Mesa's lavapipe; as root)"
    )
    setup_command.add_argument(
        "--check", action="store_true", help="only say whether real DirectML is ready, and which versions it uses"
    )

    what = "standard Gather, GatherElements and GatherND into DML custom ops"
    convert_command = commands("convert", help=what, description=f"Convert {what}.")
    convert_command.add_argument("model", help="the ONNX model to convert (never modified)")
    convert_command.add_argument("-o", "--output", required=True, help="where to write the converted model")
    convert_command.add_argument(
        "--dimension-count", default="auto", type=_dimension_count,
        help="N for every DML node: auto (the least each needs, the default) or 1 to 8",
    )  # fmt: skip
    _out_of_bounds_option(convert_command)
    convert_command.add_argument("--strict", action="store_true", help="exit 1 if any gather stays standard")
    convert_command.add_argument(
        "--keep-cpu-gathers", nargs="?", const="4.1", choices=FEATURE_LEVELS, metavar="LEVEL",
        help="leave standard the gathers ONNX Runtime's DirectML provider keeps on its CPU provider on a device of "
        "feature level LEVEL (default 4.1): shape computations, gathers of constants it folds, BFLOAT16 data, and "
        "types the device lacks",
    )  # fmt: skip
    convert_command.add_argument(
        "--provider-failures", default="raise", choices=PROVIDER_FAILURES,
        help="a gather ONNX Runtime's DirectML provider fails (`check` says fails): raise, an error naming it (the "
        "default), or onnx: convert it all the same, to compute ONNX's values (GatherElements data sliced to its "
        "indices first)",
    )  # fmt: skip
    _observation_options(convert_command, _RANK_RUN)

    lower_command = commands("lower", help="DML custom ops back into standard ONNX")
    lower_command.add_argument("model", help="the ONNX model to lower (never modified)")
    lower_command.add_argument("-o", "--output", required=True, help="where to write the lowered model")

    check_command = commands("check", help="would DirectML at a feature level accept every gather?")
    check_command.add_argument("model", help="the ONNX model to check")
    check_command.add_argument(
        "--feature-level",
        choices=FEATURE_LEVELS,
        default="4.1",
        help="the device's DirectML feature level (default 4.1)",
    )
    _observation_options(check_command, _RANK_RUN)

    run_command = commands("run", help="run a model on one backend")
    run_command.add_argument("model", help="the ONNX model to run")
    run_command.add_argument("--backend", required=True, choices=backends.BACKENDS, help="where to run it")
    run_command.add_argument("--outputs", help="save the outputs to this .npz file")
    _input_options(run_command)

    parity_command = commands("parity", help="run models on several backends and compare their outputs")
    parity_command.add_argument("models", nargs="+", metavar="MODEL", help="model files, or folders of them")
    parity_command.add_argument(
        "--backends", default=",".join(backends.DEFAULT_BACKENDS), help="comma-separated, of: "
        f"{', '.join(backends.BACKENDS)} (default: all but reference; those that cannot run here are reported as "
        "skipped)"
    )  # fmt: skip
    parity_command.add_argument(
        "--reference", default="pyop", choices=backends.BACKENDS,
        help="the backend the others are compared with (default pyop: DirectML's semantics)",
    )  # fmt: skip
    tolerance = _number(float, 0, "a number of 0 or more")
    parity_command.add_argument("--atol", type=tolerance, default=1e-5, help="absolute tolerance (default 1e-5)")
    parity_command.add_argument("--rtol", type=tolerance, default=1e-5, help="relative tolerance (default 1e-5)")
    parity_command.add_argument("--save-inputs", help="save the inputs used to this .npz file (one model only)")
    parity_command.add_argument("--report", help="write the JSON report here")
    parity_command.add_argument("--markdown", help="write the report as Markdown here")
    parity_command.add_argument(
        "--all-tensors", action="store_true",
        help="compare every intermediate value too, and name the first nodes whose outputs differ while their inputs "
        "agree (marking values as outputs can change what a backend fuses)",
    )  # fmt: skip
    _input_options(parity_command)
    return parser


def _out_of_bounds_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--out-of-bounds", choices=OUT_OF_BOUNDS_MODES, default=OUT_OF_BOUNDS_MODES[0],
        help="what an out-of-bounds index does in DML form: directml (what real DirectML reads, the default), "
        "clamp (WebNN), zero (OpenVINO's Gather), error (ONNX Runtime's CPU kernels); see `onnx-gather docs semantics`",
    )  # fmt: skip


def _observation_options(command: argparse.ArgumentParser, title: str) -> None:
    """The inputs of a run: of the model itself, or of the one that tells the ranks shape inference cannot."""
    group = command.add_argument_group(title)
    group.add_argument("--inputs", help="an .npz file with the inputs (those missing are generated)")
    group.add_argument(
        "--shape", action="append", default=[], metavar="NAME:DIMS",
        help="the shape of a generated input, e.g. token_ids:2x7 (dynamic dims default to 1)",
    )  # fmt: skip
    group.add_argument(
        "--seed",
        type=_number(int, 0, "an integer of 0 or more"),
        default=0,
        help="seed of the generated inputs (default 0)",
    )
    group.add_argument(
        "--int-range", default="0:4", metavar="LOW:HIGH", help="generated integers come from [LOW, HIGH) (default 0:4)"
    )


_RANK_RUN = "inputs of the run of ONNX Runtime that tells the ranks shape inference cannot"


def _input_options(command: argparse.ArgumentParser) -> None:
    _out_of_bounds_option(command)
    _observation_options(command, "inputs")
    command.add_argument("--device-id", type=int, default=0, help="the GPU for the cuda and dml backends")
    command.add_argument(
        "--max-elements", type=_number(int, 1, "an integer of 1 or more"), default=2**31,
        help="refuse a generated input or a DML op output larger than this many elements (default 2^31)",
    )  # fmt: skip
