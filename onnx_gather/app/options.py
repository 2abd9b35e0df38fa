"""Option groups several commands share, each declared once here and parsed once into typed values: the inputs of
a run (``--inputs``, ``--shape``, ``--seed``, ``--int-range``), the tolerances, how to run (``--out-of-bounds``,
``--device-id``, ``--max-elements``) and the output option (``graphs.model_io.outputs`` checks and writes its path).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.app.parser import number
from onnx_gather.core.contract import OUT_OF_BOUNDS_MODES
from onnx_gather.runtime import backends, inputs
from onnx_gather.runtime.comparison import OTHER_TOLERANCE, TYPE_TOLERANCES, Tolerance
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.observe import Observation


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``--shape``: ``"ids:2x7"`` -> ``("ids", (2, 7))``; ``"x:"`` is a scalar."""
    name, _, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split("x")) if dims else ()
    except ValueError:
        shape = (-1,)
    if not name or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:DIMS such as token_ids:4x6")
    return name, shape


class _Shapes(argparse.Action):
    """``--shape NAME:DIMS``, repeated: one shape per input name, a name given twice refused."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        value: object,
        option_string: str | None = None,
    ) -> None:
        name, shape = value
        shapes = dict(getattr(namespace, self.dest))
        if name in shapes:
            raise argparse.ArgumentError(
                self, f"names {name!r} twice ({inputs.dims_text(shapes[name])} and {inputs.dims_text(shape)})"
            )
        shapes[name] = shape
        setattr(namespace, self.dest, shapes)


def _int_range(text: str) -> tuple[int, int]:
    """``--int-range``: ``"0:4"`` -> ``(0, 4)``, generated integers drawn from ``[low, high)``."""
    low, _, high = text.partition(":")
    try:
        bounds = int(low), int(high)
    except ValueError:
        bounds = (0, 0)
    if bounds[0] >= bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LOW:HIGH with LOW < HIGH, such as 0:4 or -90:160")
    return bounds


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """``--inputs``, ``--shape``, ``--seed``, ``--int-range``: the same in every command that runs a model."""
    group = parser.add_argument_group("inputs")
    group.add_argument("--inputs", type=Path, help="an .npz file with the inputs (those missing are generated)")
    group.add_argument(
        "--shape",
        type=_shape,
        action=_Shapes,
        default={},
        metavar="NAME:DIMS",
        help="the shape of a generated input, e.g. token_ids:4x6 (dynamic dims default to 1); repeat for others",
    )
    group.add_argument(
        "--seed",
        type=number(int, 0, "an integer of 0 or more"),
        default=0,
        help="seed of the generated inputs (default 0)",
    )
    group.add_argument(
        "--int-range",
        type=_int_range,
        default=(0, 4),
        metavar="LOW:HIGH",
        help="generated integers come from [LOW, HIGH), e.g. -90:160 (default 0:4)",
    )


@dataclass(frozen=True)
class InputChoice:
    """The inputs options as parsed: what a model runs on."""

    inputs: Path | None = None
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    seed: int = 0
    int_range: tuple[int, int] = (0, 4)

    @classmethod
    def of(cls, args: argparse.Namespace) -> InputChoice:
        return cls(args.inputs, args.shape, args.seed, args.int_range)

    def given(self, model: onnx.ModelProto, max_elements: int | None = None) -> dict[str, np.ndarray]:
        """The arrays of ``--inputs``, checked against ``model``, as ``--shape`` is."""
        inputs.check_shapes(model, self.shapes)
        return inputs.load_npz(self.inputs, model, max_elements) if self.inputs else {}

    def feeds(self, model: onnx.ModelProto, given: Mapping[str, np.ndarray], max_elements: int) -> Feeds:
        """``given``, and the other inputs of ``model`` generated."""
        arrays = inputs.generate(model, self.shapes, self.seed, self.int_range, given, max_elements)
        generated = {name: array for name, array in arrays.items() if name not in given}
        how = inputs.drawn(generated, self.int_range)
        warning = inputs.dynamic_hint(model, self.shapes, list(given))
        return Feeds(arrays, frozenset(generated), self.seed, how, warning)

    def observation(self, given: Mapping[str, np.ndarray], folder: Path) -> Observation:
        """The run that tells the ranks no shape inference can, on these inputs."""
        return Observation(given, self.shapes, self.seed, self.int_range, folder)


def add_out_of_bounds_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-of-bounds",
        choices=OUT_OF_BOUNDS_MODES,
        default=OUT_OF_BOUNDS_MODES[0],
        help="what an out-of-bounds index does in DML form: directml (what real DirectML reads, the default), "
        "clamp (WebNN), zero (OpenVINO's Gather), error (ONNX Runtime's CPU kernels); see `onnx-gather docs semantics`",
    )


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """How backends run: ``--out-of-bounds``, ``--device-id``, ``--max-elements``, with the inputs options."""
    add_out_of_bounds_option(parser)
    add_input_options(parser)
    parser.add_argument("--device-id", type=int, default=0, help="the GPU for the cuda and dml backends")
    parser.add_argument(
        "--max-elements",
        type=number(int, 1, "an integer of 1 or more"),
        default=2**31,
        help="refuse a generated input or a DML op output larger than this many elements (default 2^31)",
    )


def build_backend(args: argparse.Namespace, name: str) -> backends.Backend:
    """The backend ``name``, built with the backend options (``--max-elements`` is the limit of its custom ops)."""
    return backends.create(name, args.device_id, args.out_of_bounds, args.max_elements)


def usable_backends(
    args: argparse.Namespace, names: Sequence[str], model: backends.Model
) -> dict[str, backends.Backend]:
    """The backends ``names`` (each once), built with the backend options; one that cannot run here, or cannot take
    ``model``, raises ``CannotRun`` (exit 4)."""
    built = {name: build_backend(args, name) for name in dict.fromkeys(names)}
    for name, backend in built.items():
        reason = backend.unavailable()
        if reason is not None:
            raise backends.CannotRun(f"backend {name} cannot run here: {reason}")
        reason = backend.refusal(model.proto)
        if reason is not None:
            raise backends.CannotRun(f"backend {name} cannot take {model.path}: {reason}")
    return built


def warned_feeds(choice: InputChoice, model: onnx.ModelProto, max_elements: int) -> Feeds:
    """The inputs of one model run, with the warning on dynamic dims generated as 1 said on stderr first."""
    feeds = choice.feeds(model, choice.given(model, max_elements), max_elements)
    if feeds.warning:
        print(f"onnx-gather: warning: {feeds.warning}", file=sys.stderr)
    return feeds


def add_tolerance_options(parser: argparse.ArgumentParser) -> None:
    tolerance = number(float, 0, "a number of 0 or more")
    for flag, position, what in (("--atol", 0, "absolute"), ("--rtol", 1, "relative")):
        by_type = ", ".join(f"{name.upper()} {pair[position]:g}" for name, pair in TYPE_TOLERANCES.items())
        parser.add_argument(
            flag,
            type=tolerance,
            help=f"{what} tolerance, for every output (default: by the output's "
            f"type: {by_type}, others {OTHER_TOLERANCE[position]:g})",
        )

    parser.add_argument(
        "--no-exact",
        action="store_true",
        help="judge float outputs by the tolerances alone, without the exact (float64) yardstick, which otherwise "
        "passes an output outside tolerance that is no farther from the float64 value than the reference's "
        "float error (docs/cli.md, Verdicts)",
    )


def tolerance(args: argparse.Namespace) -> Tolerance:
    return Tolerance(args.atol, args.rtol)


def yardstick(args: argparse.Namespace) -> backends.Backend | None:
    """The exact (float64) yardstick float outputs are judged against, unless ``--no-exact``."""
    return None if args.no_exact else build_backend(args, backends.YARDSTICK)


# The backends a command compares, or compares with: all but the yardstick, which judges them.
COMPARED = tuple(name for name in backends.BACKENDS if name != backends.YARDSTICK)


def add_model_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """The model a command works on, never modified: ``what`` says what the command does with it."""
    parser.add_argument("model", help=f"the ONNX model {what}")


def add_output_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-o", "--output", required=True, help=f"where to write the {what} model")
