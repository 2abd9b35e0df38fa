"""Named backends that run one model: DirectML's semantics through the custom ops, ONNX Runtime's own CPU
kernels, the lowered graph, OpenVINO, CUDA, and the DirectML execution provider itself.

Each says whether it can run here and, if not, why; ``run`` returns the outputs by name.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

from onnx_gather.core import contract
from onnx_gather.core.errors import UserError
from onnx_gather.directml import layout as directml_layout
from onnx_gather.directml import worker
from onnx_gather.directml.process import DirectMlError
from onnx_gather.graphs import model_io
from onnx_gather.graphs.lowering.lower import to_onnx
from onnx_gather.graphs.placement.nodes import place_nodes
from onnx_gather.graphs.plumbing import bodies, node_label
from onnx_gather.runtime import dmlsim, evaluator, exact, inputs, ops
from onnx_gather.runtime.model import Model, with_defaults_fed, with_outputs
from onnx_gather.runtime.sessions import quiet_options


@dataclass
class Outcome:
    """What one backend computed: the outputs by name, for ``pyop`` the out-of-bounds index values met, and for
    real DirectML where ONNX Runtime placed the nodes (provider -> node count and, where it lists them, names)."""

    outputs: dict[str, np.ndarray]
    out_of_bounds: dict[str, int] = field(default_factory=dict)
    placement: dict[str, dict] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)  # marked values it could not return, with why
    notes: list[str] = field(default_factory=list)  # what makes some of its outputs unreliable, in words
    routes: exact.Routes | None = None  # for the exact yardstick: how it computed each node


def _named(model: Model, outputs: list) -> dict[str, np.ndarray]:
    return dict(zip(model.output_names, (np.asarray(o) for o in outputs), strict=True))


class CannotRun(UserError):
    """A backend cannot run here (not installed, not set up) or cannot take this model (an operator it lacks):
    nothing of it was compared. The command line exits 4."""


class DeviceError(RuntimeError):
    """The backend's device cannot be used (no such device, the provider did not take the session)."""


class Backend:
    """One way of running a model."""

    name = ""
    description = ""
    runs_dml_ops = False  # whether a model that already holds onnx-gather's DML ops runs here

    def __init__(
        self, device_id: int = 0, out_of_bounds: str = "directml", max_output_elements: int = ops.MAX_OUTPUT_ELEMENTS
    ) -> None:
        self.device_id = device_id  # for the hardware providers
        self.out_of_bounds = out_of_bounds  # for the routes through DML form
        self.max_output_elements = max_output_elements  # for the custom ops

    def unavailable(self) -> str | None:
        """None if this backend can run here, else why not."""
        return None

    def refusal(self, model: onnx.ModelProto) -> str | None:
        """None if this backend can take ``model`` as far as can be told before running it, else why not."""
        nodes = (node for body in bodies(model) for node in body.nodes)
        if not self.runs_dml_ops and any(contract.is_dml(node) or contract.is_dml_scatter(node) for node in nodes):
            return (
                f"the model holds onnx-gather's DML ops, which the {self.name} backend cannot run: use pyop, or "
                "`onnx-gather lower` the model into standard ONNX first"
            )
        return None

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        """What this backend runs on, by package: for reports (call it only when the backend is available)."""
        return {"onnxruntime": onnxruntime.__version__}


class PyOp(Backend):
    name = "pyop"
    runs_dml_ops = True
    description = "to_dml(model) with the custom ops in ONNX Runtime: DirectML's semantics, the reference"

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        converted = ops.traced(model.converted(feeds, self.out_of_bounds))
        session = ops.InferenceSession(
            converted.SerializeToString(), quiet_options(model.folder), max_output_elements=self.max_output_elements
        )
        with ops.counting_out_of_bounds() as counts:
            outputs = session.run(None, inputs.for_onnxruntime(feeds))
        # Every DML node in model order; one that never ran (an If branch not taken) met none.
        nodes = [n.name for body in bodies(converted) for n in body.nodes if n.op_type in ops.TRACED.values()]
        return Outcome(_named(model, outputs), {name: counts.get(name, 0) for name in nodes})

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "onnxruntime-extensions": importlib.metadata.version("onnxruntime-extensions")}


class Cpu(Backend):
    name = "cpu"
    description = "the model as given, ONNX Runtime's native CPU kernels"

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        session = onnxruntime.InferenceSession(
            model.for_onnxruntime(), quiet_options(model.folder), providers=["CPUExecutionProvider"]
        )
        return Outcome(_named(model, session.run(None, inputs.for_onnxruntime(feeds))))


class Lowered(Backend):
    name = "lowered"
    runs_dml_ops = True
    description = "to_onnx(to_dml(model)): DirectML's semantics in standard ONNX, ONNX Runtime CPU"

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        lowered = to_onnx(model.converted(feeds, self.out_of_bounds))
        session = onnxruntime.InferenceSession(
            lowered.SerializeToString(), quiet_options(model.folder), providers=["CPUExecutionProvider"]
        )
        return Outcome(_named(model, session.run(None, inputs.for_onnxruntime(feeds))))


class OpenVino(Backend):
    name = "openvino"
    description = "the model as given, OpenVINO's CPU plugin (FP32 inference precision)"

    def unavailable(self) -> str | None:
        try:
            import openvino  # noqa: F401
        except ImportError:
            return "the openvino package is not installed (pip install 'onnx-gather[openvino]')"
        return None

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        import openvino

        core = openvino.Core()
        # OpenVINO takes every initializer as a constant: those fed are left out. What fails before inference is
        # OpenVINO not taking the model (CannotRun); what fails in it, an error.
        with _openvino_file(with_defaults_fed(model, feeds)) as path:
            try:
                read = core.read_model(str(path))
            except RuntimeError as error:
                raise _not_taken("convert", error) from error
            try:
                compiled = core.compile_model(read, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            except RuntimeError as error:
                raise _not_taken("compile", error) from error
        results = compiled(dict(feeds))
        # An output port can carry several names (an output that is also a value inside): every one of them.
        by_name = {name: np.asarray(results[port]) for port in compiled.outputs for name in port.get_names()}
        return Outcome({name: by_name[name] for name in model.output_names})

    def versions(self) -> dict[str, str]:
        return {"openvino": importlib.metadata.version("openvino")}


# OpenVINO's ONNX front end (2026.4) on operators it lacks: "No conversion rule found for operations: com.x.Op, ...";
# on a node it cannot convert (an If or Loop whose condition is of rank 2): "-- If-17 with a message:", then the node's
# validation log, whose last line says why ("Rank of If condition input must be equal to 0 or 1"), and an empty line.
_NO_CONVERSION = re.compile(r"No conversion rule found for operations: (?P<ops>[^\n]+)")
_NOT_CONVERTED = re.compile(r"^-- (?P<op>\S+) with a message:\n(?P<log>.*?)\n\n", re.MULTILINE | re.DOTALL)
# The lines of an OpenVINO message that say where in its sources it was raised, before what it says.
_RAISED_AT = re.compile(r"^(Exception from |Check '.*' failed at )\S+:\d+:$")


def _not_taken(step: str, error: RuntimeError) -> CannotRun:
    """OpenVINO could not ``step`` (convert, compile) the model: why, in one line of its own words (the operators it
    has no conversion for; the node it could not convert and the last line of its log; else its message's first line
    after where it was raised: the CPU plugin's "doesn't support Parameter operation with dynamic rank")."""
    message = str(error)
    if lacking := _NO_CONVERSION.search(message):
        return CannotRun(f"OpenVINO has no conversion for {lacking['ops'].strip()}")
    if failed := _NOT_CONVERTED.search(message):
        said = f"{failed['op']}: {failed['log'].strip().splitlines()[-1]}"
    else:
        lines = [line for line in message.splitlines() if line.strip() and not _RAISED_AT.match(line)]
        said = lines[0].strip() if lines else type(error).__name__
    return CannotRun(f"OpenVINO cannot {step} the model: {said}")


@contextlib.contextmanager
def _openvino_file(model: Model) -> Iterator[Path]:
    """A file of the model for OpenVINO, which finds external data only beside a model's file (its Python binding
    takes no folder for a model in memory): the file itself, or a derived model's written into a temporary folder."""
    if model.as_read:
        yield model.path
        return
    with tempfile.TemporaryDirectory(prefix="onnx-gather-openvino-") as folder:
        model_io.write_with_data(model.proto, Path(folder) / "model.onnx", model.folder)
        yield Path(folder) / "model.onnx"


class _Provider(Backend):
    """A hardware execution provider of ONNX Runtime, which must really take the model (no silent CPU fallback)."""

    provider = ""
    missing = ""

    def unavailable(self) -> str | None:
        if self.provider not in onnxruntime.get_available_providers():
            return self.missing
        return None

    def _session_options(self, model: Model) -> onnxruntime.SessionOptions:
        return quiet_options(model.folder)

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        session = onnxruntime.InferenceSession(
            model.for_onnxruntime(),
            self._session_options(model),
            providers=[(self.provider, {"device_id": self.device_id}), "CPUExecutionProvider"],
        )
        if session.get_providers()[0] != self.provider:
            raise DeviceError(f"{self.provider} did not take the session (no usable device {self.device_id}?)")
        return Outcome(_named(model, session.run(None, inputs.for_onnxruntime(feeds))))


class Cuda(_Provider):
    name = "cuda"
    description = "the model as given, ONNX Runtime's CUDA execution provider"
    provider = "CUDAExecutionProvider"
    missing = "onnxruntime has no CUDAExecutionProvider here (it needs onnxruntime-gpu and an NVIDIA GPU)"


class DirectMl(_Provider):
    """On Windows the DirectML provider of the installed onnxruntime-directml; elsewhere real DirectML under Wine
    (``onnx-gather setup-directml``), nodes it cannot take falling back to ONNX Runtime's CPU provider, as on Windows.
    """

    name = "dml"
    description = "the model as given, ONNX Runtime's DirectML execution provider"
    provider = "DmlExecutionProvider"
    missing = "onnxruntime has no DmlExecutionProvider here: it needs the onnxruntime-directml package"
    native = platform.system() == "Windows"
    # Under Wine, the runner that creates the sessions: None for the process's shared one (``worker.shared()``); one
    # of its own for each thread that runs sessions side by side.
    runner: worker.Runner | None = None

    def unavailable(self) -> str | None:
        if self.native:
            return super().unavailable()
        problems = directml_layout.Layout.default().problems()
        if problems:
            return f"real DirectML is not set up here ({problems[0]}): run `{directml_layout.SETUP_COMMAND}` as root"
        return None

    def refusal(self, model: onnx.ModelProto) -> str | None:
        """Under Wine, the runner carries tensors only: a model output of another kind (a sequence, a map) cannot come
        back from it (else its reply for that output read as a value DirectML fused away)."""
        other = [value for value in model.graph.output if not value.type.HasField("tensor_type")]
        if other and not self.native:
            kind = other[0].type.WhichOneof("value").removesuffix("_type").replace("_", " ")
            return (
                f"output {other[0].name!r} is a {kind}, not a tensor: the dml backend under Wine carries tensors only"
            )
        return super().refusal(model)

    def _session_options(self, model: Model) -> onnxruntime.SessionOptions:
        options = super()._session_options(model)
        options.enable_mem_pattern = False  # the DirectML provider requires both
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        return options

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        """The outputs as ONNX Runtime's DirectML provider returns them. Where one comes back empty, the provider
        leaves the others it copies back from the device unwritten (docs/semantics.md, section 9): marked values
        that came back empty are left out of a second run, and an empty output of the model's own is noted."""
        outcome = self._run(model, feeds)
        empty = [name for name, array in outcome.outputs.items() if array.size == 0]
        if any(name in model.marked for name in empty):
            left = {name for name in empty if name in model.marked}
            kept = [value for value in model.proto.graph.output if value.name not in left]
            again = self._run(with_outputs(model, kept, model.marked - left), feeds)
            outputs = {name: again.outputs.get(name, outcome.outputs.get(name)) for name in model.output_names}
            outcome = Outcome(
                {name: array for name, array in outputs.items() if array is not None},
                placement=again.placement,
                absent=again.absent,
            )
        own = [name for name in empty if name not in model.marked]
        if own:
            outcome.notes.append(f"{_empty_output(own[0])}: they hold leftover memory (docs/semantics.md, section 9)")
        return outcome

    def _run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        if self.native:
            return super().run(model, feeds)
        if self.device_id != 0:
            raise DeviceError(f"real DirectML under Wine has one device, 0 (lavapipe), not {self.device_id}")
        runner = self.runner if self.runner is not None else worker.shared()
        # the runner feeds the session's inputs, which leave out those with a default; the placement log names nodes
        loaded = runner.load(_named_nodes(with_defaults_fed(model, feeds)), fallback=True, data=model.folder)
        try:
            outputs = runner.run(loaded, feeds, absent=True)
        finally:
            runner.free(loaded)
        absent = _why_absent(model.proto, [name for name in model.output_names if name not in outputs])
        needed = [name for name in absent if name not in model.marked]
        if needed:
            raise DirectMlError(f"output {needed[0]!r}: {absent[needed[0]]}")
        placement = {p: {"nodes": count, "names": loaded.placement.get(p, [])} for p, count in loaded.placed.items()}
        present = {name: outputs[name] for name in model.output_names if name in outputs}
        return Outcome(present, placement=placement, absent=absent)

    def versions(self) -> dict[str, str]:
        if self.native:
            return super().versions()
        return directml_layout.Layout.default().versions()


def _empty_output(name: str) -> str:
    return (
        f"output {name!r} is empty, and ONNX Runtime's DirectML provider then leaves the other outputs it copies back "
        "from the device unwritten"
    )


def _why_absent(model: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """Why ONNX Runtime under DirectML returned no tensor for each output of ``names``: a constant of its (the output
    of a Constant, or of a node its constant folding computes), or else a value fused away."""
    if not names:
        return {}
    main = bodies(model)[0]
    placed = place_nodes(model)[main.where]
    constants = {
        name for node, where in zip(main.nodes, placed, strict=True) if not where.why.runs for name in node.output
    }
    return {name: worker.ABSENT_CONSTANT if name in constants else worker.ABSENT for name in names}


def _named_nodes(model: Model) -> Path | onnx.ModelProto:
    """The model for DirectML's runner, whose placement log names nodes by their names: the file or the proto, or
    where the main graph has nodes without names, a copy in which they are named ('Gather #12')."""
    if all(node.name for node in model.proto.graph.node):
        return model.path if model.as_read else model.proto
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    for position, node in enumerate(proto.graph.node):
        node.name = node_label(node, position)
    return proto


class DmlSim(Backend):
    name = "dmlsim"
    description = (
        "an emulation of the dml backend on ONNX Runtime's CPU: DirectML's gathers and scatters, the nodes the "
        "provider places on DirectML rewritten as its known behaviours say, its known failures (any OS, no GPU)"
    )

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        emulation = model.emulated(feeds)
        dmlsim.raise_at_creation(emulation)
        proto, wanted = emulation.model, dmlsim.values_read(emulation)
        produced = {out for body in bodies(proto) for node in body.nodes for out in node.output} if wanted else set()
        extra = [name for name in wanted if name not in model.output_names and name in produced]
        if extra:
            proto = onnx.ModelProto()
            proto.CopyFrom(emulation.model)
            proto.graph.output.extend(onnx.ValueInfoProto(name=name) for name in extra)
        carried = dmlsim.carried(proto)  # the types the runner carries and ONNX Runtime's Python binding does not
        options = quiet_options(model.folder)
        # Unoptimised: the lowered form's guards make ONNX Runtime's graph optimizations cost several times the run
        # (docs/measurements.md, "dmlsim"), and DirectML's own fusions are not the CPU's anyway
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = onnxruntime.InferenceSession(
            carried.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        names = [value.name for value in carried.model.graph.output]
        ran = session.run(None, inputs.for_onnxruntime(carried.feeds(feeds)))
        values = carried.returned(dict(zip(names, ran, strict=True)))
        dmlsim.raise_at_run(emulation, {**feeds, **values})
        outputs = {name: np.asarray(values[name]) for name in model.output_names}
        notes = dmlsim.notes(emulation)
        empty = [name for name, array in outputs.items() if array.size == 0]
        if empty and len(outputs) > 1:  # whichever node made it: DirectML's leftover memory, which none can emulate
            notes.append(f"{_empty_output(empty[0])} (docs/semantics.md, section 9): dmlsim computes them all the same")
        return Outcome(outputs, notes=notes)


class Evaluator(Backend):
    name = "evaluator"
    runs_dml_ops = True
    description = "to_dml(model) in onnx's reference evaluator: DirectML's semantics, no ONNX Runtime, FLOAT16 kept"

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        converted = model.converted(feeds, self.out_of_bounds, native_float16=True)
        return Outcome(_named(model, evaluator.evaluate(converted, feeds)))

    def versions(self) -> dict[str, str]:
        return {"onnx": importlib.metadata.version("onnx")}


class Exact(Backend):
    name = "exact"
    runs_dml_ops = True
    description = (
        "the model in float64 (runtime.exact): ONNX Runtime's CPU kernels where they take DOUBLE, else onnx's "
        "reference evaluator; the yardstick parity and reduce judge float results by"
    )

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        proto = model.proto
        if any(contract.is_dml(n) or contract.is_dml_scatter(n) for body in bodies(proto) for n in body.nodes):
            proto = to_onnx(proto)  # the DML ops in standard ONNX, which widens as the rest does
        try:
            outputs, routes = exact.float64_outputs(proto, feeds, model.folder)
        except exact.Unsupported as lacking:
            raise CannotRun(str(lacking)) from lacking
        return Outcome(outputs, routes=routes)

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "onnx": importlib.metadata.version("onnx")}


_CLASSES = {
    backend.name: backend for backend in (PyOp, Cpu, Lowered, OpenVino, Cuda, DirectMl, DmlSim, Evaluator, Exact)
}
BACKENDS = tuple(_CLASSES)
# parity's and the demo's: the reference evaluator only when named, the emulation of DirectML where real DirectML
# cannot run (``default_backends``); the exact yardstick is parity's own
DEFAULT_BACKENDS = tuple(name for name in BACKENDS if name not in (DmlSim.name, Evaluator.name, Exact.name))


def default_backends(emulation: bool = False) -> list[str]:
    """The backends parity and the demo run unless told: ``DEFAULT_BACKENDS``, and ``dmlsim`` where ``dml`` cannot
    run here (or ``emulation``: always)."""
    names = list(DEFAULT_BACKENDS)
    if emulation or DirectMl().unavailable() is not None:
        names.insert(names.index(DirectMl.name) + 1, DmlSim.name)
    return names


YARDSTICK = Exact.name


def create(
    name: str, device_id: int = 0, out_of_bounds: str = "directml", max_output_elements: int = ops.MAX_OUTPUT_ELEMENTS
) -> Backend:
    """The backend called ``name`` (one of ``BACKENDS``); ``pyop``'s ops refuse an output of more than
    ``max_output_elements`` elements."""
    if name not in _CLASSES:
        raise UserError(f"unknown backend {name!r} (expected one of: {', '.join(BACKENDS)})")
    return _CLASSES[name](device_id, out_of_bounds, max_output_elements)
