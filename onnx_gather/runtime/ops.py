"""DmlGather, DmlGatherElements and DmlGatherNd, DmlScatterElements and DmlScatterNd as ONNX Runtime custom
operators, through onnxruntime-extensions.

The bridge aborts the whole process when an exception escapes an op's function, and turns every
result into a Python list unless it is handed an array. So this module installs its own invocation
hook in front of the bridge's: for our ops it returns arrays and records errors instead of raising
them; every other Python op still goes through the bridge's own hook, unchanged.
"""

from __future__ import annotations

import _signal
import contextlib
import functools
import importlib.metadata
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import onnx
import onnxruntime
from google.protobuf.internal import api_implementation
from onnxruntime_extensions import PyCustomOpDef, get_library_path
from onnxruntime_extensions import _ocos as bridge

from onnx_gather.core import contract, scatter, semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.errors import UserError
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime import kernels, tables

# The bridge's name of each type a DML node carries (contract.NODE_DATA_TYPES: DirectML's less FLOAT16, which the
# bridge refuses) and of each index type.
_BRIDGE_TYPES = {
    onnx.helper.tensor_dtype_to_np_dtype(t): getattr(PyCustomOpDef, f"dt_{onnx.TensorProto.DataType.Name(t).lower()}")
    for t in sorted(contract.NODE_DATA_TYPES | {i.onnx for i in contract.INDEX_TYPES})
}
_BRIDGE_ATTRIBUTES = {
    onnx.AttributeProto.INT: PyCustomOpDef.dt_int64,
    onnx.AttributeProto.STRING: PyCustomOpDef.dt_string,
}
NODE_DTYPES = tuple(onnx.helper.tensor_dtype_to_np_dtype(t) for t in sorted(contract.NODE_DATA_TYPES))

# A session config entry marks options that already hold the custom op library: registering it
# twice makes session creation fail.
_REGISTERED_KEY = "onnx_gather.custom_ops"

_log = logging.getLogger("onnx_gather")

# onnxruntime-extensions' import sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ (its cvt module):
# this process keeps the protobuf it already loaded, but every process it starts afterwards would parse models with
# pure-Python protobuf, several times slower (`onnx-gather check` of 3,000 gathers: 20 s instead of 2). Undone here
# where this process's protobuf is not the pure-Python one, so the setting cannot be the user's.
_PROTOBUF_SETTING = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
if os.environ.get(_PROTOBUF_SETTING) == "python" and api_implementation.Type() != "python":
    del os.environ[_PROTOBUF_SETTING]


@dataclass(frozen=True, eq=False)  # each one a registered op, hashed as itself (``_arguments``)
class _Operator:
    op_type: str
    function: Callable[..., np.ndarray]
    attributes: dict[str, int]  # name -> bridge type
    inputs: int = 2  # input, indices (and a scatter's updates, of the input's type)

    def call(self, feed: Sequence[np.ndarray], attributes: dict[str, str], max_output_elements: int) -> np.ndarray:
        arguments = _arguments(self, tuple(attributes.items()))
        return self.function(*feed, **arguments, max_output_elements=max_output_elements)


@functools.lru_cache(maxsize=4096)
def _arguments(operator: _Operator, attributes: tuple[tuple[str, str], ...]) -> dict[str, int | str]:
    """``operator``'s arguments of a node's ``attributes``, remembered: the bridge checks each attribute's type when
    the session is created, then hands it over as a string on every run."""
    return {
        name: text if operator.attributes[name] == PyCustomOpDef.dt_string else int(text) for name, text in attributes
    }


def _count(input: np.ndarray, indices: np.ndarray, attributes: dict) -> int:
    """How many out-of-bounds index values (coordinates, for GatherND and ScatterND: the scatters' tuples are
    GatherND's without batch dimensions) a DML node meets; 0 where its shapes are invalid (the op itself says why)."""
    if "axis" in attributes:
        axis = attributes["axis"]
        return semantics.count_out_of_bounds(indices, input.shape[axis]) if 0 <= axis < input.ndim else 0
    counts = (attributes["input_dimension_count"], attributes["indices_dimension_count"])
    batch = attributes.get("batch_dimension_count", 0)
    try:
        semantics.gather_nd_output_sizes(input.shape, indices.shape, *counts, batch)
    except semantics.GatherError:
        return 0
    return semantics.count_out_of_bounds_nd(input, indices, *counts, batch)


def _traced(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``function`` that also counts, under the node's name, the out-of-bounds indices it meets."""

    def traced(
        input: np.ndarray,
        indices: np.ndarray,
        *updates: np.ndarray,
        node: str,
        max_output_elements: int,
        **attributes: object,
    ) -> np.ndarray:
        if _state.out_of_bounds is not None:
            _state.out_of_bounds[node] += _count(input, indices, attributes)
        return function(input, indices, *updates, max_output_elements=max_output_elements, **attributes)

    return traced


_KERNELS = {
    "DmlGather": kernels.gather,
    "DmlGatherElements": kernels.gather_elements,
    "DmlGatherNd": kernels.gather_nd,
    "DmlScatterElements": kernels.scatter_elements,
    "DmlScatterNd": kernels.scatter_nd,
}


def _operator(op: contract.DmlOp) -> _Operator:
    attributes = {name: _BRIDGE_ATTRIBUTES[kind] for name, kind in op.attribute_types().items()}
    return _Operator(op.op_type, _KERNELS[op.op_type], attributes, len(op.inputs))


_BASE_OPERATORS = tuple(_operator(op) for op in contract.OPS)
_SCATTER_OPERATORS = tuple(_operator(op) for op in contract.SCATTER_OPS)
# Every op again with a ``node`` attribute naming the DML node it stands for, for counting out-of-bounds
# indices per node (the bridge does not tell an op which node it runs).
TRACED = {o.op_type: f"{o.op_type}Traced" for o in (*_BASE_OPERATORS, *_SCATTER_OPERATORS)}


def _traced_twin(operator: _Operator) -> _Operator:
    attributes = {**operator.attributes, "node": PyCustomOpDef.dt_string}
    return _Operator(TRACED[operator.op_type], _traced(operator.function), attributes, operator.inputs)


_UNTABLED = _BASE_OPERATORS + tuple(_traced_twin(o) for o in _BASE_OPERATORS)


def traced(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each DML node swapped for its traced twin, which counts out-of-bounds indices by node name."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    for body in bodies(result):
        for node in body.nodes:
            if contract.is_dml(node) or contract.is_dml_scatter(node):
                node.op_type = TRACED[node.op_type]
                node.attribute.append(onnx.helper.make_attribute("node", node.name))
    return result


def _tabled(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``function`` reading its data from the table its ``table`` attribute names (``tables.detach``), not from its
    first input (an empty tensor of the data's type)."""

    def tabled(empty: np.ndarray, indices: np.ndarray, table: str, **attributes: object) -> np.ndarray:
        return function(tables.table(table), indices, **attributes)

    return tabled


# Each gather again with its constant data held on this side (tables.detach makes them, for InferenceSession); the
# scatters and their traced twins, once.
_OPERATORS = (
    _UNTABLED
    + tuple(
        _Operator(
            f"{o.op_type}Table", _tabled(o.function), {**o.attributes, tables.TABLE_ATTRIBUTE: PyCustomOpDef.dt_string}
        )
        for o in _UNTABLED
    )
    + _SCATTER_OPERATORS
    + tuple(_traced_twin(o) for o in _SCATTER_OPERATORS)
)


# An op refuses, before allocating it, an output of more elements than this (or than its session's
# ``max_output_elements``; the command line's --max-elements).
MAX_OUTPUT_ELEMENTS = 2**31


@dataclass(eq=False)  # each run is itself: two runs of one session on the thread's options are equal in every field
class _Run:
    """One ``InferenceSession.run`` under way: its session's output limit, its ``onnxruntime.RunOptions``, the errors
    its ops met, and what stops it (an interrupt: KeyboardInterrupt, SystemExit), to be raised once ONNX Runtime is
    out of the way (raised inside an op, it would abort the process)."""

    max_output_elements: int
    options: onnxruntime.RunOptions
    errors: list[Exception] = field(default_factory=list)
    stop: BaseException | None = None
    terminate: bool = False  # the options' terminate flag before the run was stopped, put back when it ends

    def interrupt(self, interrupt: BaseException) -> None:
        """Stop the run before its next node (ONNX Runtime's terminate flag); ``run`` raises ``interrupt``."""
        if self.stop is None:
            self.stop, self.terminate = interrupt, self.options.terminate
        self.options.terminate = True

    def raise_stop(self) -> None:
        if self.stop is not None:
            raise self.stop


def _interrupts_stop(run: _Run) -> Callable[..., object] | None:
    """Put in front of the SIGINT handler set from Python (Python's own raises KeyboardInterrupt) one that does not
    raise: what it raises stops ``run`` instead. Returns the handler to put back when the run ends, or None where
    nothing changed: only the main thread receives signals and can set handlers, and where SIGINT is ignored or left
    to the system there is nothing to wrap. (``_signal``, the C module under ``signal``: the wrappers of ``signal``
    convert handlers to enums, 4 to 8 us a call, which every run paid twice.)"""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = _signal.getsignal(_signal.SIGINT)
    if not callable(previous):
        return None

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            previous(signum, frame)
        except BaseException as interrupt:  # raised inside an op, it would abort the process
            run.interrupt(interrupt)

    _signal.signal(_signal.SIGINT, handler)
    return previous


class _RunState(threading.local):
    """Per thread: the ``InferenceSession.run`` under way, if any, and the ``onnxruntime.RunOptions`` of a run not
    given any (not nested in another: it has them in use), made once.

    ONNX Runtime runs a session's kernels on the thread that called ``run`` (sequential execution).
    """

    def __init__(self) -> None:
        self.run: _Run | None = None
        self.options = onnxruntime.RunOptions()  # its terminate flag put back after each run that set it
        self.out_of_bounds: Counter | None = None  # per node, while ``counting_out_of_bounds`` is active


_state = _RunState()
_registered: dict[int, _Operator] = {}
_registering = threading.Lock()
# The bridge's private names the ops hook into (onnxruntime-extensions has no public way to return arrays and keep
# exceptions from aborting the process); pyproject.toml admits the versions they were tested with.
_PRIVATE = ("_on_pyop_invocation", "Opdef")
TESTED_EXTENSIONS = "0.15"
_bridge_invoke: Callable[..., tuple] | None = None  # the bridge's own hook, once ours is in front of it


def _record(operator: _Operator, error: Exception) -> None:
    if not isinstance(error, semantics.GatherError | scatter.ScatterError):
        error = RuntimeError(f"{operator.op_type}: {type(error).__name__}: {error}")
    if _state.run is not None:
        _state.run.errors.append(error)
    else:
        _log.error("%s (the node's output is empty)", error)


def _invoke(op_id: int, feed: list[np.ndarray], attributes: dict[str, str]) -> tuple:
    operator = _registered.get(op_id)
    if operator is None:
        assert _bridge_invoke is not None  # set by _register_operators, before any op can run
        return _bridge_invoke(op_id, feed, attributes)
    run = _state.run
    result = None  # for an op that fails, and every op of a stopped run: an empty output
    if run is None or run.stop is None:  # a stopped run ends before its next node
        try:  # anything that escapes into the bridge aborts the process
            limit = MAX_OUTPUT_ELEMENTS if run is None else run.max_output_elements
            result = np.ascontiguousarray(operator.call(feed, attributes, limit))
        except Exception as error:
            _record(operator, error)
        except BaseException as interrupt:  # KeyboardInterrupt, SystemExit: no error of the op's
            if run is None:
                _log.error(
                    "%s: %s outside onnx_gather.InferenceSession.run, which alone can raise it (the node's "
                    "output is empty)",
                    operator.op_type,
                    type(interrupt).__name__,
                )
            else:
                run.interrupt(interrupt)
    if result is None:
        result = np.empty((0,), feed[0].dtype)
    return (op_id, result.shape, result)


def _register_operators() -> None:
    """Define the ops for the bridge and put our hook in front of its own: once, on first use."""
    global _bridge_invoke
    with _registering:
        if _registered:
            return
        missing = [f"_ocos.{name}" for name in _PRIVATE if not hasattr(bridge, name)]
        if missing:
            version = importlib.metadata.version("onnxruntime-extensions")
            raise ImportError(
                f"onnxruntime-extensions {version} lacks {', '.join(missing)}, which onnx-gather's custom ops hook "
                f"into; onnx-gather is tested with onnxruntime-extensions {TESTED_EXTENSIONS}"
            )
        _bridge_invoke = bridge._on_pyop_invocation
        _define()


def _define() -> None:
    for operator in _OPERATORS:
        for data_type in (_BRIDGE_TYPES[dtype] for dtype in NODE_DTYPES):
            for index_dtype in contract.INDEX_DTYPES:
                opdef = bridge.Opdef.create(
                    operator.function,
                    op_type=f"{DOMAIN}::{operator.op_type}",
                    inputs=[data_type, _BRIDGE_TYPES[index_dtype], data_type][: operator.inputs],
                    outputs=[data_type],
                    attrs=operator.attributes,
                )
                _registered[opdef._nativedef.obj_id] = operator
    PyCustomOpDef.install_hooker(_invoke)


@contextlib.contextmanager
def counting_out_of_bounds() -> Iterator[Counter]:
    """While active, the traced ops count the out-of-bounds index values they meet, per node name."""
    outer, _state.out_of_bounds = _state.out_of_bounds, Counter()
    try:
        yield _state.out_of_bounds
    finally:
        _state.out_of_bounds = outer


def register(options: onnxruntime.SessionOptions) -> onnxruntime.SessionOptions:
    """Register the custom ops on ``options`` (once, however often it is called) and return it."""
    _register_operators()
    try:
        options.get_session_config_entry(_REGISTERED_KEY)
    except RuntimeError:  # not registered yet
        options.register_custom_ops_library(get_library_path())
        options.add_session_config_entry(_REGISTERED_KEY, "1")
    return options


def session_options() -> onnxruntime.SessionOptions:
    """New ``onnxruntime.SessionOptions`` with the DML ops (``contract.OPS``, ``contract.SCATTER_OPS``) registered."""
    return register(onnxruntime.SessionOptions())


def _configured_folder(options: onnxruntime.SessionOptions) -> Path | None:
    try:
        return Path(options.get_session_config_entry(tables.EXTERNAL_DATA_KEY))
    except RuntimeError:  # not set
        return None


def _detached(
    model: str | os.PathLike | bytes | onnx.ModelProto, options: onnxruntime.SessionOptions
) -> tuple[str | bytes, list[np.ndarray]]:
    """What the session loads: ``model`` with the constant data of its DML nodes held on this side (tables.detach),
    as bytes, and those tables; or ``model`` as it is (a path or bytes) where no DML node has constant data."""
    folder = _configured_folder(options)
    if isinstance(model, bytes) and DOMAIN.encode() not in model:  # no DML node: nothing to parse
        return model, []
    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
        if folder is not None and folder != Path(model).parent:  # its external data would be looked for there
            return model, []
        proto, folder = onnx.load(model, load_external_data=False), Path(model).parent
    else:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load_model_from_string(model)
    detached = tables.detach(proto, folder, {o.op_type for o in _UNTABLED})
    if detached is None:
        return (model.SerializeToString() if isinstance(model, onnx.ModelProto) else model), []
    if isinstance(model, str) and _configured_folder(options) is None:  # the rest of its external data is there
        options.add_session_config_entry(tables.EXTERNAL_DATA_KEY, str(folder))
    return detached[0].SerializeToString(), detached[1]


class InferenceSession(onnxruntime.InferenceSession):
    """An ``onnxruntime.InferenceSession`` with the custom ops registered.

    ``run`` raises the error a DML op met (an out-of-bounds index in ``error`` mode, shapes DirectML
    would refuse, an output of more than ``max_output_elements`` elements) as a Python exception; a plain
    ``onnxruntime.InferenceSession`` can only log it. ``model`` is a path, serialized bytes or an ``onnx.ModelProto``.
    """

    def __init__(
        self,
        model: str | os.PathLike | bytes | onnx.ModelProto,
        sess_options: onnxruntime.SessionOptions | None = None,
        providers: Sequence[str] | None = None,
        *,
        max_output_elements: int = MAX_OUTPUT_ELEMENTS,
        **kwargs: Any,
    ) -> None:
        if max_output_elements < 1:
            raise UserError(f"the output element limit must be positive, got {max_output_elements}")
        self.max_output_elements = max_output_elements
        options = register(sess_options or onnxruntime.SessionOptions())
        if options.execution_mode != onnxruntime.ExecutionMode.ORT_SEQUENTIAL:
            raise UserError("onnx_gather.InferenceSession needs sequential execution (execution_mode ORT_SEQUENTIAL)")
        # The tables stay registered while this session holds them (tables.TABLES keeps weak references).
        model, self._tables = _detached(model, options)
        super().__init__(model, options, providers or ["CPUExecutionProvider"], **kwargs)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        run_options: onnxruntime.RunOptions | None = None,
    ) -> list:
        """Run the model as ``onnxruntime.InferenceSession.run`` does, raising any error a DML op met. Ctrl-C (SIGINT,
        on the main thread) stops the run before its next node and raises KeyboardInterrupt (or what the SIGINT
        handler raises; one that does not raise lets the run go on)."""
        state = _state
        outer = state.run
        if run_options is None:
            run_options = state.options if outer is None else onnxruntime.RunOptions()
        run = _Run(self.max_output_elements, run_options)
        previous = _interrupts_stop(run)  # first: a Ctrl-C pending raises here, before anything needs undoing
        state.run = run
        try:
            try:
                outputs = super().run(output_names, input_feed, run_options)
            except Exception as runtime_error:  # "Exiting due to terminate flag" when stopped
                run.raise_stop()
                if run.errors:
                    raise run.errors[0] from runtime_error
                raise
            run.raise_stop()
            if run.errors:
                raise run.errors[0]
            return outputs
        finally:
            # No Python function is called here, so no signal is handled in between: signal.signal first runs the
            # handler of one pending (ours, which may set the flag), then the flag goes back.
            if previous is not None:
                _signal.signal(_signal.SIGINT, previous)
            if run.stop is not None:  # the flag was set here: the caller's options (or the thread's) serve again
                run_options.terminate = run.terminate
            state.run = outer
