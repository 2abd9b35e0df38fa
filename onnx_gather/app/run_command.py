"""``onnx-gather run``: a model on one backend, its inputs and outputs printed."""

from __future__ import annotations

import argparse
import sys
import traceback

import numpy as np

from onnx_gather.app import options
from onnx_gather.app.command import Command
from onnx_gather.app.hints import failure_hint
from onnx_gather.app.options import InputChoice
from onnx_gather.app.progress import Progress
from onnx_gather.core.words import one_line
from onnx_gather.graphs import model_io
from onnx_gather.graphs.types import array_type
from onnx_gather.runtime import backends, inputs


def _describe(name: str, array: np.ndarray) -> str:
    line = f"{name:<20} {array_type(array.dtype)} {inputs.dims_text(array.shape)}"
    if array.size and array.dtype.kind in "fiub":
        numbers = array.astype(np.float64)
        line += f"  min {numbers.min():.6g}  max {numbers.max():.6g}  mean {numbers.mean():.6g}"
    first = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in array.ravel()[:6].tolist())
    return f"{line}  [{first}{', ...' if array.size > 6 else ''}]"


class RunCommand(Command):
    name = "run"
    help = "run a model on one backend"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        options.add_model_argument(parser, "to run")
        parser.add_argument("--backend", required=True, choices=backends.BACKENDS, help="where to run it")
        parser.add_argument("--outputs", help="save the outputs to this .npz file")
        options.add_backend_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        model, choice = backends.Model.read(args.model), InputChoice.of(args)
        outputs = model_io.outputs({"--outputs": args.outputs}, [(args.model, model.proto)], [choice.inputs])
        backend = options.usable_backends(args, [args.backend], model)[args.backend]
        feeds = options.warned_feeds(choice, model.proto, args.max_elements)
        progress = Progress(1, sys.stderr)
        progress.step(f"{args.model}: {args.backend}")
        try:
            outcome = backend.run(model, feeds.arrays)
        except backends.CannotRun:
            raise  # it could not take the model: nothing ran (exit 4, said by the command line)
        except Exception as error:
            progress.clear()
            if args.debug:
                traceback.print_exc()
            hint = failure_hint(error, args.backend, model.proto, feeds, choice)
            hint = f"; {hint}" if hint else ""
            print(f"onnx-gather: {args.backend} failed on {args.model}: {one_line(error)}{hint}", file=sys.stderr)
            return 1
        finally:
            progress.clear()  # also when interrupted
        print(f"{args.model} on {args.backend}: {backend.description}")
        for name, array in feeds.arrays.items():
            print(f"  input  {_describe(name, array)}  ({feeds.said(name)})")
        for name, array in outcome.outputs.items():
            print("  output " + _describe(name, array))
        for node, count in outcome.out_of_bounds.items():
            if count:
                print(f"  {count} out-of-bounds index values met by DML node {node!r}")
        for note in outcome.notes:
            print(f"  note: {note}")
        if args.outputs:
            with outputs.writing("--outputs") as path:
                inputs.save_npz(path, outcome.outputs)
        return 0
