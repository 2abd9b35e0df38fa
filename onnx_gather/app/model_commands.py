"""The commands that work on a model without running it for its outputs: ``convert``, ``lower``, ``check``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from onnx_gather.app import options
from onnx_gather.app.check_page import check_page
from onnx_gather.app.check_report import check_document, session_of, summary, tallied
from onnx_gather.app.command import Command
from onnx_gather.app.options import InputChoice
from onnx_gather.core import contract
from onnx_gather.core.errors import UserError
from onnx_gather.core.scatter import DUPLICATE_MODES
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT
from onnx_gather.core.words import counted, listed
from onnx_gather.graphs import allowzero, model_io
from onnx_gather.graphs.analysis import HIGHEST_LEVEL, parse_dimension_count
from onnx_gather.graphs.changes import Report
from onnx_gather.graphs.convert import PROVIDER_FAILURES, convert
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.placement.check import Verdict, check, flagged, measured, reads, with_session
from onnx_gather.graphs.placement.gather import FEATURE_LEVELS
from onnx_gather.graphs.placement.known import Status
from onnx_gather.graphs.placement.nodes import Where, Why
from onnx_gather.graphs.placement.session import Fate, Session

_OUTPUT = "-o/--output"  # convert's and lower's output
_HTML = "--html"  # check's page

_RANK_RUN = (
    "The inputs options are those of the run of ONNX Runtime that tells the ranks no shape inference can (made only "
    "where one is needed)."
)


def _print_report(report: Report, verb: str, source: str, target: str) -> None:
    print(f"{source} -> {target}")
    ops = sorted(set(report.before) | set(report.after), key=lambda op: (-report.before[op], op))
    width = max([len(op) for op in ops] + [2])
    print(f"  {'op':<{width}} {'before':>7} {'after':>7}")
    for op in ops:
        if report.before[op] != report.after[op]:
            print(f"  {op:<{width}} {report.before[op]:>7} {report.after[op]:>7}")
    unchanged = sum(1 for op in ops if report.before[op] == report.after[op])
    print(
        f"  ({unchanged} other op types unchanged; {sum(report.before.values())} nodes before, "
        f"{sum(report.after.values())} after)"
    )
    total = len(report.changed) + len(report.left)
    kinds = {*contract.SCATTER_BY_STANDARD, *contract.SCATTER_BY_TYPE}
    scatters = [c for c in (*report.changed, *report.left) if c.op_type in kinds]
    done = sum(1 for c in scatters if c.result)
    if total > len(scatters) or not scatters:
        print(f"{verb} {len(report.changed) - done} of {counted(total - len(scatters), 'gather')}.")
    if scatters:  # counted apart
        print(f"{verb} {done} of {counted(len(scatters), 'scatter')}.")
    for changed in report.changed:
        for remark in (changed.note, changed.ranks):
            if remark:
                print(f"  node {changed.node!r}: {remark}")
    for note in report.notes:
        print(f"  {note}")
    for left in report.left:
        print(f"  left as it was: {left.describe()}")


def _dimension_count(text: str) -> str | int:
    """``--dimension-count``: the rule is ``analysis.parse_dimension_count``'s, worded for the command line."""
    try:
        count = parse_dimension_count(text)
    except UserError:
        most = MAX_DIMENSION_COUNT
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected auto or 1 to {most} (DirectML tensors have 1 to {most} dimensions)"
        ) from None
    return "auto" if count is None else count


class ConvertCommand(Command):
    name = "convert"
    help = "standard Gather, GatherElements and GatherND into DML custom ops"
    description = f"Convert {help}. {_RANK_RUN}"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        options.add_model_argument(parser, "to convert (never modified)")
        options.add_output_option(parser, "converted")
        parser.add_argument(
            "--dimension-count",
            default="auto",
            type=_dimension_count,
            help="N for every DML node: auto (the least each needs, the default) or 1 to 8",
        )
        options.add_out_of_bounds_option(parser)
        parser.add_argument("--strict", action="store_true", help="exit 1 if any gather stays standard")
        parser.add_argument(
            "--keep-cpu-gathers",
            nargs="?",
            const="4.1",
            choices=FEATURE_LEVELS,
            metavar="LEVEL",
            help="leave standard the gathers ONNX Runtime's DirectML provider keeps on its CPU provider on a device "
            "of feature level LEVEL (default 4.1): shape computations, gathers of constants it folds, BFLOAT16 data, "
            "and types the device lacks",
        )
        parser.add_argument(
            "--provider-failures",
            default="raise",
            choices=PROVIDER_FAILURES,
            help="a gather ONNX Runtime's DirectML provider fails (`check` says fails): raise, an error naming it "
            "(the default), or onnx: convert it all the same, to compute ONNX's values (GatherElements data sliced to "
            "its indices first)",
        )
        parser.add_argument(
            "--scatter-duplicates",
            default="error",
            choices=DUPLICATE_MODES,
            help="a scatter writing different values to one element: error (the default: which one DirectML keeps is "
            "a race) or last (the last stays, as on ONNX Runtime's CPU)",
        )
        parser.add_argument(
            "--reshape-allowzero-0",
            action="store_true",
            help="also set allowzero=0 on each Reshape with allowzero=1 where no 0 can reach its shape, so that it "
            "computes the same: ONNX Runtime's DirectML provider fails on allowzero=1 with a -1 in the shape",
        )
        parser.add_argument(
            "--assume-nonempty-inputs",
            action="store_true",
            help="with --reshape-allowzero-0: the model's inputs never have a dim of 0, so their dims (and those "
            "shape inference names after them) count as not 0",
        )
        options.add_input_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.assume_nonempty_inputs and not args.reshape_allowzero_0:
            raise UserError("--assume-nonempty-inputs is a word for --reshape-allowzero-0: give both, or neither")
        model, choice = model_io.load(args.model), InputChoice.of(args)
        outputs = model_io.outputs({_OUTPUT: args.output}, [(args.model, model)], [choice.inputs])
        reshapes = None
        if args.reshape_allowzero_0:
            model, reshapes = allowzero.clear_allowzero(model, args.assume_nonempty_inputs)
        observation = choice.observation(choice.given(model), Path(args.model).parent)
        result, report = convert(
            model,
            args.dimension_count,
            args.out_of_bounds,
            observation,
            keep_cpu_gathers=args.keep_cpu_gathers is not None,
            feature_level=args.keep_cpu_gathers or HIGHEST_LEVEL,
            provider_failures=args.provider_failures,
            scatter_duplicates=args.scatter_duplicates,
        )
        outputs.save(_OUTPUT, result, args.model)
        _print_report(report, "Converted", args.model, args.output)
        if reshapes is not None:
            print(allowzero.tally(reshapes))
            for change in reshapes:
                print(f"  {change.describe()}" if change.changed else f"  left as it was: {change.describe()}")
        return 1 if args.strict and report.left else 0


class LowerCommand(Command):
    name = "lower"
    help = "DML custom ops back into standard ONNX"

    def declare(self, parser: argparse.ArgumentParser) -> None:
        options.add_model_argument(parser, "to lower (never modified)")
        options.add_output_option(parser, "lowered")

    def run(self, args: argparse.Namespace) -> int:
        model = model_io.load(args.model)
        outputs = model_io.outputs({_OUTPUT: args.output}, [(args.model, model)])
        result, report = lower(model)
        outputs.save(_OUTPUT, result, args.model)
        _print_report(report, "Lowered", args.model, args.output)
        before, after = sum(report.before.values()), sum(report.after.values())
        reading = sum(1 for change in report.changed if change.out_of_bounds.startswith("directml"))
        if reading and after > before:
            print(
                f"out_of_bounds=directml puts DirectML's reading of out-of-bounds indices beside the gathers that "
                f"may meet them: {after - before:+,} nodes here. The cheaper modes add 1 to 3 nodes a gather: "
                "convert with --out-of-bounds clamp, zero or error."
            )
        return 1 if report.left else 0


class CheckCommand(Command):
    name = "check"
    help = "where would ONNX Runtime's DirectML provider run each node, and what is DirectML known to do there?"
    description = (
        "Say, per node, where ONNX Runtime's DirectML provider runs it and why, what DirectML is known to do there "
        f"(fail, or differ from ONNX Runtime's CPU), and for gathers whether DirectML takes them. {_RANK_RUN}"
    )

    def declare(self, parser: argparse.ArgumentParser) -> None:
        options.add_model_argument(parser, "to check")
        parser.add_argument(
            "--feature-level",
            choices=FEATURE_LEVELS,
            default="4.1",
            help="the device's DirectML feature level (default 4.1)",
        )
        parser.add_argument(
            "--all-nodes",
            action="store_true",
            help="a line for every node (by default: gathers, nodes on the CPU provider and nodes with a known "
            "DirectML behaviour; the others are counted)",
        )
        parser.add_argument("--json", action="store_true", help="print a JSON report of every node instead")
        parser.add_argument(
            "--html",
            help="also write the report as one self-contained HTML page here: the summary, a picture of the model as "
            "the session runs it, every node's row",
        )
        options.add_input_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        model, choice = model_io.load(args.model), InputChoice.of(args)
        outputs = model_io.outputs({_HTML: args.html}, [(args.model, model)], [choice.inputs])
        given = choice.given(model)
        observation = choice.observation(given, Path(args.model).parent)
        verdicts = check(model, args.feature_level, observation)
        lines = []
        if (args.inputs or args.shape) and reads(verdicts):  # what these inputs meet of the flags a run can tell
            run = observation.values(model, reads(verdicts))
            verdicts = measured(verdicts, run.arrays)
            lines.append(
                f"Known behaviours measured on one run of ONNX Runtime's CPU on {run.inputs}."
                if not run.failure
                else f"The flags that read what the run did not make stay possible: {run.failure}."
            )
        session, trouble = session_of(model, args.model)
        if session is not None:
            verdicts = with_session(verdicts, session)
        lines = summary(verdicts, args.feature_level, session) + lines
        if trouble:  # where the session's line would be
            lines.insert(1, trouble)
        if args.html:
            document = check_document(args.model, args.feature_level, verdicts, lines, True, session)
            page = check_page(document, tallied(verdicts, session), verdicts, session)
            outputs.write_bytes(_HTML, page.encode())
        if args.json:
            document = check_document(args.model, args.feature_level, verdicts, lines, args.all_nodes, session)
            print(json.dumps(document, indent=2))
        else:
            _print_check(verdicts, lines, args.all_nodes, session)
        return 1 if any(v.status in (Where.FAILS, Where.REFUSED) for v in verdicts) else 0


_SHOWN = (Status.MET, Status.POSSIBLE)  # the flags shown without --all-nodes
_GONE_REASONS = {
    Fate.CONSTANT: Why.CONSTANT.sentence,
    Fate.FOLDED: Why.FOLDED.sentence,
    Fate.REMOVED: "ONNX Runtime's optimizations remove it (an Identity, a Dropout, a no-op, a node no output needs)",
}


def _print_check(verdicts: list[Verdict], lines: list[str], every: bool, session: Session | None) -> None:
    """A line per gather, node off DirectML or failing (per node with ``every``; a node no provider runs only
    then), the memory copies (three of them without ``every``), then the known behaviours grouped by rule and status
    (the ruled-out and not-met ones with ``every``), then the summary."""
    for verdict in verdicts:
        gone = verdict.fate in (Fate.CONSTANT, Fate.FOLDED, Fate.REMOVED)
        if every or (
            not gone and (verdict.gather or verdict.runs_on != Where.DIRECTML or verdict.status == Where.FAILS)
        ):
            where = f"({verdict.op_type}, {verdict.where})"
            status = verdict.fate.value if gone else verdict.status
            reason = _GONE_REASONS[verdict.fate] if gone else verdict.reason
            fused = f" (fused into {verdict.session_node!r})" if verdict.fate == Fate.FUSED else ""
            print(f"{status:<8} node {verdict.node!r} {where}: {reason}{fused}")
            if every:
                for found in verdict.known:
                    why = f": {found.ruled_out}" if found.status == Status.RULED_OUT else ""
                    print(f"         {found.kind} ({found.status}{why}): {found.what}")
        if verdict.ranks:
            print(f"         ranks: {verdict.ranks}")
    copies = session.copies if session is not None else ()
    for copy in copies if every else copies[:3]:
        side = "DirectML to the CPU" if copy.to == Where.CPU else "the CPU to DirectML"
        takers = listed(copy.consumers, limit=3)
        print(f"copy     {copy.op_type} of {copy.value!r} from {side}: made by {copy.producer!r}, taken by {takers}")
    if len(copies) > 3 and not every:
        print(f"         and {len(copies) - 3} more copies (--all-nodes lists them)")
    for group in flagged(verdicts):
        if every or group.status in _SHOWN:
            nodes = listed(
                (f"{name!r}" + (f" ({counted(count, 'element')})" if count else "") for name, count in group.nodes),
                limit=3,
                quoted=False,
            )
            print(f"{group.kind:<8} {group.rule}, {group.status} at {counted(len(group.nodes), 'node')}: {nodes}")
            print(f"         {group.what}" + (f"; {group.when}" if group.when else ""))
    print("\n".join(lines))
