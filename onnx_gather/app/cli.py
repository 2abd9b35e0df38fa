"""The ``onnx-gather`` commands (the parser is ``app.parser``). Exit codes: 0 success, 1 a check failed, 2 bad input
(one line on stderr), 3 an internal error, 130 interrupted."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.app import demo, documents, report
from onnx_gather.app.parser import UsageError, build_parser
from onnx_gather.app.progress import Progress
from onnx_gather.core.errors import UserError
from onnx_gather.core.words import counted
from onnx_gather.directml import install
from onnx_gather.directml.layout import Layout
from onnx_gather.graphs import model_io
from onnx_gather.graphs.changes import Report
from onnx_gather.graphs.check import check, summary
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.lower import lower
from onnx_gather.runtime import backends, inputs, ops
from onnx_gather.runtime.observe import Observation
from onnx_gather.runtime.parity import failure_hint, one_line, run_parity


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
    print(f"{verb} {len(report.changed)} of {counted(total, 'gather')}.")
    for changed in report.changed:
        for remark in (changed.note, changed.ranks):
            if remark:
                print(f"  node {changed.node!r}: {remark}")
    for note in report.notes:
        print(f"  {note}")
    for left in report.left:
        print(f"  left as it was: {left.describe()}")


def _observation(args: argparse.Namespace, model: onnx.ModelProto) -> Observation:
    return Observation(
        _given(args, model), inputs.parse_shapes(args.shape), args.seed,
        inputs.parse_int_range(args.int_range), Path(args.model).parent,
    )  # fmt: skip


def _read_files(model_path: str | Path, model: onnx.ModelProto, inputs_file: str | None = None) -> list[Path]:
    """The files a command reads: the model, its external data files, the --inputs file."""
    return [Path(model_path), *model_io.data_files(model, model_path), *([Path(inputs_file)] if inputs_file else [])]


@contextlib.contextmanager
def _writing(flag: str, path: str | Path) -> Iterator[None]:
    """An error writing an output (a full disk, a quota) as bad input naming the flag and the file."""
    try:
        yield
    except OSError as error:
        raise model_io.OutputError(f"{flag} {path}: cannot write it: {error.strerror or error}") from error


def _convert(args: argparse.Namespace) -> int:
    model = model_io.load(args.model)
    model_io.check_output(args.output, "-o/--output", _read_files(args.model, model, args.inputs))
    result, report = convert(
        model,
        args.dimension_count,
        args.out_of_bounds,
        _observation(args, model),
        args.keep_cpu_gathers,
        provider_failures=args.provider_failures,
    )
    with _writing("-o/--output", args.output):
        model_io.save(result, args.output, args.model)
    _print_report(report, "Converted", args.model, args.output)
    return 1 if args.strict and report.left else 0


def _lower(args: argparse.Namespace) -> int:
    model = model_io.load(args.model)
    model_io.check_output(args.output, "-o/--output", _read_files(args.model, model))
    result, report = lower(model)
    with _writing("-o/--output", args.output):
        model_io.save(result, args.output, args.model)
    _print_report(report, "Lowered", args.model, args.output)
    before, after = sum(report.before.values()), sum(report.after.values())
    reading = sum(1 for change in report.changed if change.reason.startswith("out_of_bounds=directml"))
    if reading and after > before:
        print(f"out_of_bounds=directml puts DirectML's reading of out-of-bounds indices beside the gathers that may "
              f"meet them: {after - before:+,} nodes here. The cheaper modes add 1 to 3 nodes a gather: convert with "
              "--out-of-bounds clamp, zero or error.")  # fmt: skip
    return 1 if report.left else 0


def _check(args: argparse.Namespace) -> int:
    model = model_io.load(args.model)
    verdicts = check(model, args.feature_level, _observation(args, model))
    for verdict in verdicts:
        print(f"{verdict.status:<8} node {verdict.node!r} ({verdict.op_type}, {verdict.where}): {verdict.reason}")
        if verdict.ranks:
            print(f"         ranks: {verdict.ranks}")
    print(summary(verdicts, args.feature_level))
    return 0 if all(v.status in ("DirectML", "CPU", "unknown") for v in verdicts) else 1


def _given(args: argparse.Namespace, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The arrays of ``--inputs``, checked against ``model`` and loaded once per command (``args`` keeps them)."""
    if "given" not in vars(args):
        limit = vars(args).get("max_elements")
        args.given = inputs.load(args.inputs, model, limit) if args.inputs else {}
    return args.given


def _feeds(args: argparse.Namespace, model: backends.Model) -> dict[str, np.ndarray]:
    given = _given(args, model.proto)
    shapes = inputs.parse_shapes(args.shape)
    int_range = inputs.parse_int_range(args.int_range)
    return inputs.generate(model.proto, shapes, args.seed, int_range, given, args.max_elements)


def _hint(args: argparse.Namespace, model: backends.Model, error: BaseException) -> str:
    """What the inputs can do about a backend's ``error``: a generated integer input that reached an index out of
    range, else which dynamic dims were generated as 1 (a likely cause of a failed run), else ""."""
    given = list(_given(args, model.proto))
    generated = [value.name for value in inputs.model_inputs(model.proto) if value.name not in given]
    int_range = inputs.parse_int_range(args.int_range)
    return inputs.index_hint(model.proto, str(error), generated, int_range) or inputs.dynamic_hint(
        model.proto, inputs.parse_shapes(args.shape), given
    )


def _describe(name: str, array: np.ndarray) -> str:
    line = f"{name:<20} {array.dtype.name} {inputs.dims_text(array.shape)}"
    if array.size and array.dtype.kind in "fiub":
        numbers = array.astype(np.float64)
        line += f"  min {numbers.min():.6g}  max {numbers.max():.6g}  mean {numbers.mean():.6g}"
    first = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in array.ravel()[:6].tolist())
    return f"{line}  [{first}{', ...' if array.size > 6 else ''}]"


def _run(args: argparse.Namespace) -> int:
    model = backends.Model(Path(args.model), model_io.load(args.model))
    if args.outputs:
        model_io.check_output(args.outputs, "--outputs", _read_files(args.model, model.proto, args.inputs))
    backend = backends.create(args.backend, args.device_id, args.out_of_bounds)
    reason = backend.unavailable()
    if reason is not None:
        raise UsageError(f"backend {args.backend} cannot run here: {reason}")
    feeds = _feeds(args, model)
    progress = Progress(1, sys.stderr)
    progress.step(f"{args.model}: {args.backend}")
    try:
        outcome = backend.run(model, feeds)
    except Exception as error:
        progress.clear()
        if args.debug:
            traceback.print_exc()
        hint = failure_hint(error, _hint(args, model, error))
        hint = f"; {hint}" if hint else ""
        print(f"onnx-gather: {args.backend} failed on {args.model}: {one_line(error)}{hint}", file=sys.stderr)
        return 1
    finally:
        progress.clear()  # also when interrupted
    print(f"{args.model} on {args.backend}: {backend.description}")
    for name, array in feeds.items():
        print("  input  " + _describe(name, array))
    for name, array in outcome.outputs.items():
        print("  output " + _describe(name, array))
    for node, count in outcome.out_of_bounds.items():
        if count:
            print(f"  {count} out-of-bounds index values met by DML node {node!r}")
    if args.outputs:
        with _writing("--outputs", args.outputs):
            inputs.save(args.outputs, outcome.outputs)
    return 0


def _model_paths(names: list[str]) -> list[Path]:
    paths = []
    for name in names:
        path = Path(name)
        found = sorted(path.rglob("*.onnx")) if path.is_dir() else [path]
        if not found:
            raise UsageError(f"{path}: a folder with no .onnx model in it")
        paths += found
    return paths


def _load_models(paths: list[Path]) -> tuple[list[backends.Model], dict[Path, str]]:
    """The models that load, and why each other one was refused; a single model that does not load is bad input."""
    models, refused = [], {}
    for path in paths:
        try:
            models.append(backends.Model(path, model_io.load(path)))
        except model_io.ModelError as error:
            if len(paths) == 1:
                raise
            refused[path] = str(error)
    return models, refused


def _check_parity_outputs(args: argparse.Namespace, models: list[backends.Model], refused: dict[Path, str]) -> None:
    reads = [*refused, *([Path(args.inputs)] if args.inputs else [])]
    for model in models:
        reads += _read_files(model.path, model.proto)
    given: dict[str, str] = {}
    for flag, path in (("--report", args.report), ("--markdown", args.markdown), ("--save-inputs", args.save_inputs)):
        if not path:
            continue
        model_io.check_output(path, flag, reads)
        for other, other_path in given.items():
            if model_io.same_file(Path(path), Path(other_path)):
                raise UsageError(f"{flag} {path}: is also the {other} file; give each its own path")
        given[flag] = path


def _parity(args: argparse.Namespace) -> int:
    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    if not names:
        raise UsageError(f"--backends {args.backends!r}: name at least one backend ({', '.join(backends.BACKENDS)})")
    for name in (*names, args.reference):
        backends.create(name)  # an unknown name is bad input
    paths = _model_paths(args.models)
    if len(paths) > 1 and (args.inputs or args.save_inputs):
        raise UsageError("--inputs and --save-inputs take a single model")
    models, refused = _load_models(paths)
    _check_parity_outputs(args, models, refused)
    runs = []
    progress = Progress(len(models), sys.stderr)
    for model in models:
        try:
            feeds = _feeds(args, model)
        except inputs.InputError as error:  # in a folder, one model's inputs do not stop the others
            if len(paths) == 1:
                raise
            refused[model.path] = str(error)
            progress.model_done()
            continue
        if args.save_inputs:
            with _writing("--save-inputs", args.save_inputs):
                inputs.save(args.save_inputs, feeds)
        runs.append(run_parity(
            model, feeds, names, args.reference, args.atol, args.rtol, args.device_id, args.out_of_bounds,
            functools.partial(_hint, args, model), args.all_tensors, args.seed, list(_given(args, model.proto)),
            lambda name, path=model.path: progress.step(f"{path}: {name}"),
        ))  # fmt: skip
        progress.model_done()
        if len(paths) > 1:  # a folder's models are reported as each ends; the verdict on them all after the files
            print(report.text(runs[-1]) + "\n")
    progress.finish()
    passed = all(run.report["passed"] for run in runs) and not refused
    _write_parity_files(args, runs, refused, passed, len(paths))
    if len(paths) == 1:  # its verdict only once its files are written
        print(report.text(runs[0]) + "\n")
    for path, reason in refused.items():
        print(f"{path}: refused: {reason}\n")
    if len(paths) > 1:
        print(f"{sum(run.report['passed'] for run in runs)} of {len(paths)} models passed.")
        for run in runs:
            print(f"  {'passed' if run.report['passed'] else 'FAILED'}  {run.report['model']}")
        for path in refused:
            print(f"  refused {path}")
    return 0 if passed else 1


def _write_parity_files(
    args: argparse.Namespace, runs: list, refused: dict[Path, str], passed: bool, models: int
) -> None:
    """The --report and --markdown files of a parity run, written before its verdict is printed."""
    if args.report:
        reports = [run.report for run in runs] + [_refused_report(path, reason) for path, reason in refused.items()]
        document = reports[0] if models == 1 else {"models": reports, "passed": passed}
        with _writing("--report", args.report):
            model_io.write_bytes(args.report, json.dumps(document, indent=2).encode())
    if args.markdown:
        with _writing("--markdown", args.markdown):
            model_io.write_bytes(args.markdown, report.markdown(runs, refused).encode())


def _refused_report(path: Path, reason: str) -> dict:
    """A model of a folder that could not be loaded: in the JSON report, with why."""
    return {"model": str(path), "refused": reason, "passed": False}


def _setup_directml(args: argparse.Namespace) -> int:
    layout = Layout.default()
    if args.check:
        return install.check(layout, sys.stdout)
    try:
        return install.setup(layout, sys.stdout)
    except install.SetupError as error:
        for line in str(error).splitlines():
            print(f"onnx-gather: setup-directml: {line}", file=sys.stderr)
        return 2


_COMMANDS = {
    "demo": lambda args: demo.run(sys.stdout, args.out_of_bounds),
    "docs": lambda args: documents.show(args.name, sys.stdout),
    "setup-directml": _setup_directml,
    "convert": _convert,
    "lower": _lower,
    "check": _check,
    "run": _run,
    "parity": _parity,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 success, 1 a check failed, 2 bad input, 3 an internal error,
    130 interrupted)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if hasattr(args, "max_elements"):
            ops.set_max_output_elements(args.max_elements)
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:  # what was started (Wine, Xvfb) has been ended on the way out
        Progress(0, sys.stderr).clear()
        print("onnx-gather: interrupted", file=sys.stderr)
        return 130
    except (UserError, OSError) as error:  # bad input (a file one cannot read too): one line naming it
        if debug:
            traceback.print_exc()
        text = one_line(error, typed=False)
        if isinstance(error, OSError) and error.filename is None:  # "[Errno 28] No space left on device": say where
            command = next((word for word in argv if word in _COMMANDS), "onnx-gather")
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
