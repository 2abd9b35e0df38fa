"""``onnx-gather parity``: models on several backends, every output compared with the reference's; the terminal
table, the JSON and the Markdown reports written here, from the typed results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onnx_gather.app import options, report
from onnx_gather.app.command import INCOMPLETE, Command
from onnx_gather.app.hints import parity_hint
from onnx_gather.app.options import InputChoice
from onnx_gather.app.parity_page import marked_picture, parity_page
from onnx_gather.app.parser import UsageError
from onnx_gather.app.progress import Announced, Progress
from onnx_gather.app.report import Reported
from onnx_gather.graphs import model_io
from onnx_gather.runtime import backends, inputs
from onnx_gather.runtime.parity import run_parity


def _backend_names(text: str) -> list[str]:
    """``--backends``: comma-separated names of backends, at least one, each known."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: name at least one backend ({', '.join(backends.BACKENDS)})")
    if backends.YARDSTICK in names:
        raise argparse.ArgumentTypeError(
            f"{backends.YARDSTICK} is the float64 yardstick parity runs beside the backends to judge them, not one "
            "to compare (--no-exact leaves it out)"
        )
    unknown = [name for name in names if name not in options.COMPARED]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown backend {unknown[0]!r} (expected one of: {', '.join(options.COMPARED)})"
        )
    return names


def _model_paths(names: list[str]) -> list[Path]:
    paths = []
    for name in names:
        path = Path(name)
        found = sorted(path.rglob("*.onnx")) if path.is_dir() else [path]
        if not found:
            raise UsageError(f"{path}: a folder with no .onnx model in it")
        paths += found
    return paths


def _load_models(paths: list[Path], single: bool) -> tuple[list[backends.Model], dict[Path, str]]:
    """The models that load, and why each other one was refused; a ``single`` model that does not load is bad
    input."""
    models, refused = [], {}
    for path in paths:
        try:
            models.append(backends.Model.read(path))
        except model_io.ModelError as error:
            if single:
                raise
            refused[path] = str(error)
    return models, refused


# The backends a run compares: those asked for, those that must run (named without --allow-skipped), and each built.
_Chosen = tuple[list[str], frozenset[str], dict[str, backends.Backend]]


def _backends(args: argparse.Namespace) -> _Chosen:
    named = args.backends is not None
    asked = args.backends if named else backends.default_backends()
    required = frozenset(asked if named and not args.allow_skipped else ())
    names = dict.fromkeys((args.reference, *asked))  # each once
    return asked, required, {name: options.build_backend(args, name) for name in names}


class ParityCommand(Command):
    name = "parity"
    help = "run models on several backends and compare their outputs"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("models", nargs="+", metavar="MODEL", help="model files, or folders of them")
        parser.add_argument(
            "--backends",
            type=_backend_names,
            help=f"comma-separated, of: {', '.join(options.COMPARED)}; each must run, or the run is incomplete "
            "(exit 4) (default: all but evaluator and dmlsim, and dmlsim where dml cannot run here; those that cannot "
            "run here listed as skipped)",
        )
        parser.add_argument(
            "--allow-skipped",
            action="store_true",
            help="a backend named in --backends that cannot run here, or cannot take the model, does not make the run "
            "incomplete (it is listed as skipped; one besides the reference must still compare every output)",
        )
        parser.add_argument(
            "--reference",
            default="pyop",
            choices=options.COMPARED,
            help="the backend the others are compared with (default pyop: DirectML's semantics)",
        )
        options.add_tolerance_options(parser)
        parser.add_argument("--save-inputs", help="save the inputs used to this .npz file (one model only)")
        parser.add_argument("--report", help="write the JSON report here")
        parser.add_argument("--markdown", help="write the report as Markdown here")
        parser.add_argument(
            "--html",
            help="write the report as one self-contained HTML page here: the verdict, the tables, a histogram of the "
            "differences per output, with --all-tensors the first nodes outside tolerance on a picture of the model",
        )
        parser.add_argument(
            "--all-tensors",
            action="store_true",
            help="compare every intermediate value too, and name the first nodes whose outputs differ while their "
            "inputs agree (marking values as outputs can change what a backend fuses)",
        )
        parser.add_argument(
            "--strict-ties",
            action="store_true",
            help="fail an output that differs only by the order of sort keys equal within tolerance (TopK, ArgMax, "
            "ArgMin, NonMaxSuppression, and what gathers by their indices), which otherwise passes as TIED",
        )
        options.add_backend_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        choice = InputChoice.of(args)
        chosen = _backends(args)
        paths = _model_paths(args.models)
        # A single model stops at bad input and is reported alone; a folder's models are reported as each ends.
        single = len(paths) == 1
        if not single and (choice.inputs or args.save_inputs):
            raise UsageError("--inputs and --save-inputs take a single model")
        models, refused = _load_models(paths, single)
        written = {
            "--report": args.report,
            "--markdown": args.markdown,
            "--html": args.html,
            "--save-inputs": args.save_inputs,
        }
        outputs = model_io.outputs(written, [(m.path, m.proto) for m in models], [*refused, choice.inputs])
        runs = self._run_models(args, choice, chosen, models, refused, single, outputs)
        self._write_files(args, runs, refused, single, outputs)
        _print_verdicts(runs, refused, len(paths))
        verdicts = {run.parity.verdict for run in runs}
        if "failed" in verdicts or refused:
            return 1
        return INCOMPLETE if "incomplete" in verdicts else 0

    @staticmethod
    def _run_models(
        args: argparse.Namespace,
        choice: InputChoice,
        chosen: _Chosen,
        models: list[backends.Model],
        refused: dict[Path, str],
        single: bool,
        outputs: model_io.Outputs,
    ) -> list[Reported]:
        """Each model on the ``chosen`` backends; a model whose inputs cannot be made is refused (raised if
        ``single``)."""
        asked, required, built = chosen
        yardstick = options.yardstick(args)
        max_elements = args.max_elements
        runs = []
        progress = Progress(len(models), sys.stderr)
        for model in models:
            try:
                feeds = choice.feeds(model.proto, choice.given(model.proto, max_elements), max_elements)
            except inputs.InputError as error:  # in a folder, one model's inputs do not stop the others
                if single:
                    raise
                refused[model.path] = str(error)
                progress.model_done()
                continue
            if args.save_inputs:
                with outputs.writing("--save-inputs") as path:
                    inputs.save_npz(path, feeds.arrays)
            shown = {name: Announced(backend, progress, model.path) for name, backend in built.items()}
            parity = run_parity(
                model,
                feeds,
                [shown[name] for name in asked],
                shown[args.reference],
                options.tolerance(args),
                all_tensors=args.all_tensors,
                required=required,
                strict_ties=args.strict_ties,
                exact=yardstick,
            )
            model.conversions.clear()  # the DML forms its backends shared: not kept while the next model runs
            drawn = marked_picture(model.proto, model.path, parity) if args.html and args.all_tensors else None
            runs.append(Reported(parity, parity_hint(parity, model.proto, choice), drawn))
            progress.model_done()
            if not single:  # the verdict on them all comes after the files
                print(report.text(runs[-1]) + "\n")
        progress.finish()
        return runs

    @staticmethod
    def _write_files(
        args: argparse.Namespace,
        runs: list[Reported],
        refused: dict[Path, str],
        single: bool,
        outputs: model_io.Outputs,
    ) -> None:
        """The --report, --markdown and --html files of a parity run, written before its verdict is printed."""
        if args.report:
            documents = [report.document(run) for run in runs]
            documents += [{"model": str(path), "refused": reason, "passed": False} for path, reason in refused.items()]
            passed = all(run.parity.passed for run in runs) and not refused
            document = documents[0] if single else {"models": documents, "passed": passed}
            outputs.write_bytes("--report", json.dumps(document, indent=2).encode())
        if args.markdown:
            outputs.write_bytes("--markdown", report.markdown(runs, refused).encode())
        if args.html:
            outputs.write_bytes("--html", parity_page(runs, refused).encode())


def _print_verdicts(runs: list[Reported], refused: dict[Path, str], count: int) -> None:
    """A single model's verdict (once its files are written), or the verdict on ``count`` models."""
    if count == 1:  # a single model is never refused: its bad input was raised
        print(report.text(runs[0]) + "\n")
        return
    for path, reason in refused.items():
        print(f"{path}: refused: {reason}\n")
    print(report.passed_line(runs, count))
    for run in runs:
        verdict = run.parity.verdict
        print(f"  {verdict if run.parity.passed else verdict.upper()}  {run.parity.model}")
    for path in refused:
        print(f"  refused {path}")
