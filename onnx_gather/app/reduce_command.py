"""``onnx-gather reduce``: a model that differs (or fails) on one backend against a reference, cut down to the few
nodes that still show it, written with its inputs and the command line that shows it."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from onnx_gather.app import options
from onnx_gather.app.command import Command
from onnx_gather.app.options import InputChoice
from onnx_gather.app.parser import UsageError, number
from onnx_gather.core.contract import OUT_OF_BOUNDS_MODES
from onnx_gather.core.words import listed
from onnx_gather.graphs import model_io
from onnx_gather.runtime import backends, inputs
from onnx_gather.runtime.reduce import Budget, NoDifference, Reducer, ReferenceFailure

_FEEDS = "-o's inputs file"  # the window's inputs, beside -o


class ReduceCommand(Command):
    name = "reduce"
    help = "cut a model down to the few nodes where a backend still differs from, or fails against, the reference"
    description = (
        "Runs the model itself on the backend, the reference once with every value marked as an output, then "
        "windows of the model's main graph on the backend (declared as the model declares them, dynamic dims "
        "kept), each fed what the reference computed, by delta debugging: chunks, then single nodes, until leaving "
        "out any one node loses the symptom (the same failure: type, op type, HRESULT or status; or a difference "
        "of the size first seen), or the budget is spent. Writes the window as -o OUT.onnx, its inputs as OUT.npz, "
        "and prints the parity command that shows it. Exit 0 with a reduced model, 1 when the backend does not "
        "differ in the first place."
    )

    def declare(self, parser: argparse.ArgumentParser) -> None:
        options.add_model_argument(parser, "that differs or fails")
        parser.add_argument("--backend", required=True, choices=options.COMPARED, help="where it differs or fails")
        parser.add_argument(
            "--reference",
            default="pyop",
            choices=options.COMPARED,
            help="the backend it is compared with, which must run the model (default pyop: DirectML's semantics)",
        )
        options.add_tolerance_options(parser)
        options.add_output_option(parser, "reduced")
        parser.add_argument(
            "--max-runs",
            type=number(int, 1, "an integer of 1 or more"),
            default=Budget.runs,
            help=f"stop after this many runs of the backend with the smallest window so far, said to be not minimal "
            f"(default {Budget.runs})",
        )
        parser.add_argument(
            "--max-minutes",
            type=number(float, 0, "a number of 0 or more"),
            default=Budget.seconds / 60,
            help=f"the same after this many minutes (default {Budget.seconds / 60:g})",
        )
        options.add_backend_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.backend == args.reference:
            raise UsageError(f"--backend and --reference both name {args.backend}: compare it with another")
        model, choice = backends.Model.read(args.model), InputChoice.of(args)
        output = Path(args.output)
        feeds_file = output.with_suffix(".npz")
        outputs = model_io.outputs(
            {"-o": args.output, _FEEDS: str(feeds_file)}, [(args.model, model.proto)], [choice.inputs]
        )
        built = options.usable_backends(args, [args.backend, args.reference], model)
        feeds = options.warned_feeds(choice, model.proto, args.max_elements)

        def progress(line: str) -> None:
            print(f"reduce: {line}", file=sys.stderr, flush=True)

        tolerance = options.tolerance(args)
        try:
            reducer = Reducer(
                model,
                feeds.arrays,
                built[args.backend],
                built[args.reference],
                tolerance,
                progress,
                options.yardstick(args),
            )
        except ReferenceFailure as failure:  # the reference must run the whole model: its values feed every window
            raise UsageError(
                f"the reference {args.reference} fails on {args.model} (every value marked as an output): "
                f"{failure}; give another --reference"
            ) from failure
        try:
            reduction = reducer.reduce(Budget(args.max_runs, args.max_minutes * 60))
        except NoDifference as agreed:
            print(f"{args.model}: {agreed} ({tolerance.describe()}): nothing to reduce.")
            return 1
        model_io.inline_small_data(reduction.model, model.path)  # not a copy of every data file of the model
        outputs.save("-o", reduction.model, model.path)
        with outputs.writing(_FEEDS) as path:
            inputs.save_npz(path, reduction.feeds)
        count = len(model.proto.graph.node)
        print(
            f"{args.model}: {count} nodes cut down to {len(reduction.nodes)} that still show it on {args.backend} "
            f"({reduction.runs} runs): {listed(reduction.nodes, 10, quoted=False)}"
        )
        print(f"  the whole model on {args.backend}: {reduction.whole.detail}")
        print(f"  this window on {args.backend}:  {reduction.symptom.detail}")
        if not reduction.minimal:
            print(
                f"  Not minimal: the budget ({args.max_runs} runs, {args.max_minutes:g} minutes) ran out; this is "
                "the smallest window that showed it so far."
            )
        if reduction.note:
            print(f"  Note: {reduction.note}.")
        print(f"Written: {output} and its inputs {feeds_file} (the values {args.reference} computed there).")
        # The repro is offered only as the printed command judges it: the files as written, read back.
        again, _ = reducer.judge(backends.Model.read(output), inputs.load_npz(feeds_file))
        if again is None or not again.same_as(reduction.whole):
            print(
                f"  Note: it does not reproduce with the command below "
                f"({again.detail if again else 'no difference there'}): {args.backend} may not be deterministic "
                "on it, or it depends on what the whole model fuses."
            )
        print("Show it with:\n  " + shlex.join(_parity_command(args, output, feeds_file)))
        return 0


def _parity_command(args: argparse.Namespace, output: Path, feeds_file: Path) -> list[str]:
    command = [
        "onnx-gather",
        "parity",
        str(output),
        "--inputs",
        str(feeds_file),
        "--backends",
        args.backend,
        "--reference",
        args.reference,
    ]
    if args.out_of_bounds != OUT_OF_BOUNDS_MODES[0]:
        command += ["--out-of-bounds", args.out_of_bounds]
    for flag, value in (("--atol", args.atol), ("--rtol", args.rtol)):
        if value is not None:
            command += [flag, f"{value:g}"]
    if args.no_exact:
        command.append("--no-exact")
    return command
