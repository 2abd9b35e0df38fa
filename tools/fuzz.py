"""Fuzz the three custom ops: random DML nodes (attribute values and types, element types, shapes, index values)
built into models and run in ONNX Runtime. Run by hand: python tools/fuzz.py [--examples 10000] [--seed 0]

The process must never abort, and every failure must be a clean Python exception with a message: a session
that ONNX Runtime refuses, or a run that raises. Every run that succeeds must equal the numpy reference bit
for bit, and every op error must be one the reference raises too. Prints one summary line; exits 1 on a
finding, 0 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import sys

import numpy as np
import onnxruntime
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h

import onnx_gather
from onnx_gather.core.semantics import GatherError

ELEMENT_TYPES = [
    T.FLOAT,
    T.DOUBLE,
    T.INT64,
    T.INT32,
    T.INT16,
    T.INT8,
    T.UINT64,
    T.UINT32,
    T.UINT16,
    T.UINT8,
    T.FLOAT16,
    T.BOOL,
    T.STRING,
]  # the last three have no registration
INDEX_TYPES = [T.INT64, T.INT32, T.UINT64, T.UINT32, T.INT16, T.FLOAT]
MODES = ["clamp", "zero", "error", "", "wrap", "CLAMP", "clamp\x00", "zéro"]

counts: collections.Counter = collections.Counter()
findings: list[str] = []


OPS = ["DmlGather", "DmlGatherElements", "DmlGatherNd"]
_COUNTS = ("input_dimension_count", "indices_dimension_count", "batch_dimension_count")


def _attribute_values(draw, op: str) -> dict:
    """Attributes, now and then of a wrong type, missing, or one too many."""
    if op == "DmlGatherNd":
        attributes = {name: draw(st.integers(-2, 10) | st.sampled_from([2**40, -(2**40)])) for name in _COUNTS}
    else:
        attributes = {"axis": draw(st.integers(-3, 9) | st.sampled_from([2**40, -(2**40)]))}
    if op == "DmlGather":
        attributes["index_dimensions"] = draw(st.integers(-2, 10))
    attributes["out_of_bounds"] = draw(st.sampled_from(MODES))
    twist = draw(st.integers(0, 19))
    if twist == 0:
        attributes.pop(draw(st.sampled_from(sorted(attributes))))
    elif twist == 1:
        attributes[sorted(attributes)[0]] = draw(st.sampled_from(["0", 1.5, [0, 1]]))
    elif twist == 2:
        attributes["extra"] = 1
    return attributes


@st.composite
def well_formed_nd(draw):
    """A DmlGatherNd DirectML would take: batch dims, tuples of every length, padding ones, indices in and out."""
    element, index = draw(st.sampled_from(ELEMENT_TYPES[:10])), draw(st.sampled_from(INDEX_TYPES[:4]))
    r = draw(st.integers(1, 5))
    batch = draw(st.integers(0, r - 1))
    k = draw(st.integers(1, r - batch))
    data = [draw(st.integers(0, 3)) for _ in range(r)]
    index_dims = [*data[:batch], *(draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))), k]
    out_rank = len(index_dims) - 1 + r - batch - k
    n = max(r, len(index_dims), out_rank, 1) + draw(st.integers(0, 1))
    if n > 8:
        n, index_dims = r, [*data[:batch], k]  # keep it within 8 dimensions
    shape, index_shape = [1] * (n - r) + data, [1] * (n - len(index_dims)) + index_dims
    attributes = dict(zip(_COUNTS, (r, len(index_dims), batch), strict=True))
    attributes["out_of_bounds"] = draw(st.sampled_from(MODES[:3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return "DmlGatherNd", element, index, shape, index_shape, attributes, rng


@st.composite
def well_formed(draw):
    """A node DirectML would take, so that the success path is fuzzed as much as the failures."""
    op = draw(st.sampled_from(["DmlGather", "DmlGatherElements"]))
    element, index = draw(st.sampled_from(ELEMENT_TYPES[:10])), draw(st.sampled_from(INDEX_TYPES[:4]))
    rank = draw(st.integers(1, 6))
    axis = draw(st.integers(0, rank - 1))
    shape = [draw(st.integers(0, 3)) for _ in range(rank)]
    attributes = {"axis": axis, "out_of_bounds": draw(st.sampled_from(MODES[:3]))}
    if op == "DmlGather":
        index_dimensions = draw(st.integers(0, rank - axis))  # C has at least axis + ... ones to crop
        index_shape = [1] * (rank - index_dimensions) + [draw(st.integers(1, 3)) for _ in range(index_dimensions)]
        attributes["index_dimensions"] = index_dimensions
    else:
        index_shape = [draw(st.integers(0, 3)) if d == axis else size for d, size in enumerate(shape)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return op, element, index, shape, index_shape, attributes, rng


@st.composite
def hostile(draw):
    op = draw(st.sampled_from(OPS))
    element, index = draw(st.sampled_from(ELEMENT_TYPES)), draw(st.sampled_from(INDEX_TYPES))
    rank = draw(st.integers(0, 9))
    shape = [draw(st.integers(0, 4)) for _ in range(rank)]
    index_rank = rank if draw(st.integers(0, 4)) else draw(st.integers(0, 9))
    index_shape = [draw(st.integers(0, 4)) for _ in range(index_rank)]
    if op == "DmlGather" and index_rank == rank and draw(st.booleans()):
        index_shape[: max(rank - 2, 0)] = [1] * max(rank - 2, 0)  # often well formed
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return op, element, index, shape, index_shape, _attribute_values(draw, op), rng


def _array(rng, elem, shape, extremes=False):
    dtype = h.tensor_dtype_to_np_dtype(elem)
    if elem == T.STRING:
        return np.array(rng.choice(["a", "b"], shape), dtype=object)
    if elem == T.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    values = [info.min, info.max, 0, 1, 2, 3, 5, -1, -2, -5] if extremes else list(range(-4, 5))
    values = [v for v in values if info.min <= v <= info.max]
    return rng.choice(np.array(values, dtype=dtype), shape) if shape else np.array(values[0], dtype=dtype)


def check(case) -> None:
    op, element, index, shape, index_shape, attributes, rng = case
    node = h.make_node(op, ["input", "indices"], ["output"], name="fuzzed", domain=onnx_gather.DOMAIN, **attributes)
    graph = h.make_graph(
        [node],
        "fuzz",
        [h.make_tensor_value_info("input", element, None), h.make_tensor_value_info("indices", index, None)],
        [h.make_tensor_value_info("output", element, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("onnx_gather", 1)], ir_version=10)
    feeds = {"input": _array(rng, element, shape), "indices": _array(rng, index, index_shape, extremes=True)}
    try:
        session = onnx_gather.InferenceSession(model)
    except Exception as error:
        counts["session refused"] += 1
        if not str(error):
            findings.append(f"session refused without a message: {type(error).__name__} for {case[:6]}")
        return
    try:
        (output,) = session.run(None, feeds)
    except GatherError as error:
        counts["op error"] += 1
        _check_reference_fails(op, feeds, attributes, str(error), case)
        return
    except Exception as error:  # onnxruntime refusing the feeds (a type or rank it has no kernel for)
        counts["runtime error"] += 1
        if not str(error):
            findings.append(f"runtime error without a message: {type(error).__name__} for {case[:6]}")
        return
    counts["ran"] += 1
    expected = _reference(op, feeds, attributes)
    if isinstance(expected, Exception) or expected.tobytes() != output.tobytes() or expected.shape != output.shape:
        findings.append(f"result differs from the reference ({expected!r:.200}) for {case[:6]}")


_REFERENCES = {
    "DmlGather": (onnx_gather.dml_gather, ("axis", "index_dimensions", "out_of_bounds")),
    "DmlGatherElements": (onnx_gather.dml_gather_elements, ("axis", "out_of_bounds")),
    "DmlGatherNd": (onnx_gather.dml_gather_nd, (*_COUNTS, "out_of_bounds")),
}


def _reference(op, feeds, attributes):
    function, declared = _REFERENCES[op]
    attributes = {name: value for name, value in attributes.items() if name in declared}  # the bridge drops others
    try:
        return function(feeds["input"], feeds["indices"], **attributes)
    except Exception as error:
        return error


def _check_reference_fails(op, feeds, attributes, message, case) -> None:
    if not isinstance(_reference(op, feeds, attributes), GatherError):
        findings.append(f"the op failed ({message}) where the reference did not, for {case[:6]}")


def run(examples: int, random_seed: int) -> int:
    @seed(random_seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(well_formed() | well_formed_nd() | hostile())
    def fuzz(case) -> None:
        counts["examples"] += 1
        check(case)

    fuzz()
    print(
        f"fuzz: {counts['examples']} examples: {counts['ran']} ran and equal the reference, "
        f"{counts['op error']} clean op errors, {counts['session refused']} sessions refused cleanly, "
        f"{counts['runtime error']} clean runtime errors; {len(findings)} findings"
    )
    for finding in findings[:20]:
        print("  finding:", finding)
    return 1 if findings else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    onnxruntime.set_default_logger_severity(4)  # a refused session is counted, not logged
    sys.exit(run(args.examples, args.seed))


if __name__ == "__main__":
    main()
