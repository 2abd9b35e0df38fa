"""ONNX Runtime's typed GatherElements and Scatter tests as data: ``GatherElementsOpTest.{int8_t, ..., MLFloat16}`` of
``gather_elements_op_test.cc``, each ``RunTestWrapper<T>()``: 21 calls of ``RunTest<T, TIndex>(input_dims,
indices_dims, has_axis, axis)`` per type, 231 cases; ``Scatter.{int8_t, ..., MLFloat16}`` of ``scatter_op_test.cc``
likewise: 19 calls per type, each running a ``Scatter`` 9 and a ``ScatterElements`` 11 tester, 418 cases.

Everything but the index values is the test's: the shapes, the axis (an attribute only where ``has_axis``), the types,
opset 11, the data (``GetData``: ``ValueRange<T>(size, 1, 1)``, i.e. 1, 2, 3, ...) and the expected output, which
``GetData`` computes from the data and the indices (``reference`` below, its loop as the test writes it). A scatter
call's data is ``ValueRange<T>(size, 0, 2)`` (0, 2, 4, ...), its updates ``ValueRange<T>(size, 1, 2)`` but where an
earlier update wrote the same element, which takes that update's value, and its expected output the data with the
updates written (``scatter_reference``, the test's loop; int8 values wrap as C++'s conversions do). The test
draws each index as ``std::rand() % (2 * input_dims[axis]) - input_dims[axis]`` (from ``-dim`` to ``dim - 1``,
negative ones included) after ``std::srand(std::time(0))`` in every call; those values change from run to run, so a
fixed sequence stands in for ``std::rand()``: that of Microsoft's C runtime (the platform of ONNX Runtime's DirectML
builds), ``state = state * 214013 + 2531011 (mod 2**32)``, ``rand() = (state >> 16) & 0x7fff``, seeded with 1 (C's
seed before any ``srand``, as if ``std::time(0)`` returned 1) again in every call, as the test reseeds in every call
(within one second, with the same seed).

``python tools/peer_typed_cases.py`` writes these cases into cases.json; tests/test_peers.py holds the file to them.
"""

from __future__ import annotations

import numpy as np

SOURCE = "ort/gather_elements_op_test.cc"
SCATTER_SOURCE = "ort/scatter_op_test.cc"
SEED = 1
# The test's T and numpy's name for it, in the order of the file's TESTs.
TYPES = (
    ("int8_t", "int8"),
    ("int16_t", "int16"),
    ("int32_t", "int32"),
    ("int64_t", "int64"),
    ("uint8_t", "uint8"),
    ("uint16_t", "uint16"),
    ("uint32_t", "uint32"),
    ("uint64_t", "uint64"),
    ("float", "float32"),
    ("double", "float64"),
    ("MLFloat16", "float16"),
)
# RunTestWrapper<T>'s calls: (TIndex, input_dims, indices_dims, has_axis, axis), has_axis and axis None where the call
# leaves them to their defaults (false, 0).
CALLS = (
    ("int32_t", (2, 3), (1, 2), None, None),
    ("int32_t", (2, 2), (2, 2), True, 1),
    ("int64_t", (2, 2), (2, 2), True, -1),
    ("int32_t", (2, 2, 2), (1, 2, 1), True, 1),
    ("int32_t", (2, 2, 1), (1, 2, 1), True, 1),
    ("int32_t", (1, 2, 2), (1, 2, 1), True, 1),
    ("int64_t", (2, 2, 2), (1, 2, 1), True, 2),
    ("int32_t", (3, 3), (3, 2), True, 1),
    ("int64_t", (3, 3), (3, 2), None, None),
    ("int32_t", (3,), (2,), True, 0),
    ("int32_t", (2, 2, 2), (2, 2, 2), None, None),
    ("int64_t", (2, 2, 2), (3, 2, 2), True, None),
    ("int32_t", (2, 2, 2, 3), (3, 2, 2, 2), True, 0),
    ("int64_t", (2, 2, 3, 3, 2), (2, 2, 3, 2, 2), None, None),
    ("int32_t", (2, 2, 1, 3, 1), (2, 2, 1, 2, 1), None, None),
    ("int64_t", (2, 3, 2), (2, 3, 2), True, -2),
    ("int64_t", (2, 2, 2), (2, 2, 3), True, 2),
    ("int32_t", (2, 2, 3, 2), (2, 2, 2, 3), True, -1),
    ("int64_t", (2, 1, 2, 3, 1, 2), (2, 1, 2, 2, 1, 2), True, 5),
    ("int32_t", (2, 1, 2, 2, 3, 2, 2), (2, 1, 2, 3, 2, 2, 2), True, 3),
    ("int64_t", (2, 1, 1, 2, 3, 2, 3), (2, 1, 1, 2, 3, 2, 2), True, -5),
)
# scatter_op_test.cc's RunTestWrapper<T>, as above.
SCATTER_CALLS = (
    ("int32_t", (2, 3), (1, 2), None, None),
    ("int32_t", (2, 2), (2, 2), True, 1),
    ("int64_t", (2, 2), (2, 2), True, -1),
    ("int32_t", (2, 2, 2), (1, 2, 1), True, 1),
    ("int64_t", (2, 2, 2), (1, 2, 1), True, 2),
    ("int32_t", (3, 3), (3, 2), True, 1),
    ("int64_t", (3, 3), (3, 2), None, None),
    ("int32_t", (3,), (2,), True, 0),
    ("int32_t", (2, 2, 2), (2, 2, 2), None, None),
    ("int64_t", (2, 2, 2), (3, 2, 2), True, None),
    ("int32_t", (2, 2, 2, 3), (3, 2, 2, 2), True, 0),
    ("int64_t", (2, 2, 3, 3, 2), (2, 2, 3, 2, 2), None, None),
    ("int32_t", (2, 2, 1, 3, 1), (2, 2, 1, 2, 1), None, None),
    ("int64_t", (2, 3, 2), (2, 3, 2), True, -2),
    ("int64_t", (2, 2, 2), (2, 2, 3), True, 2),
    ("int32_t", (2, 2, 3, 2), (2, 2, 2, 3), True, -1),
    ("int64_t", (2, 1, 2, 3, 1, 2), (2, 1, 2, 2, 1, 2), True, 5),
    ("int32_t", (2, 1, 2, 2, 3, 2, 2), (2, 1, 2, 3, 2, 2, 2), True, 3),
    ("int64_t", (2, 1, 1, 2, 3, 2, 3), (2, 1, 1, 2, 3, 2, 2), True, -5),
)
# A scatter call's two testers: op and opset.
SCATTER_TESTERS = (("Scatter", 9), ("ScatterElements", 11))
INDEX_TYPES = {"int32_t": "int32", "int64_t": "int64"}


def rand(seed: int = SEED):
    """``std::rand()`` of Microsoft's C runtime after ``std::srand(seed)``: 0 to 32767."""
    state = seed
    while True:
        state = (state * 214013 + 2531011) % 2**32
        yield (state >> 16) & 0x7FFF


def call_text(t: str, call: tuple) -> str:
    """The call as RunTestWrapper<T> writes it, T and TIndex filled in."""
    index, input_dims, indices_dims, has_axis, axis = call
    dims = lambda sizes: "{" + ", ".join(map(str, sizes)) + "}"  # noqa: E731
    args = [dims(input_dims), dims(indices_dims)]
    args += ["true"] * (has_axis is not None) + [f"{axis}LL"] * (axis is not None)
    return f"RunTest<{t}, {index}>({', '.join(args)})"


def _name(t: str, call: tuple, tester: tuple[str, int] | None = None) -> str:
    """A case's name: a gather call's, or a scatter call's with its tester (op, opset)."""
    if tester is None:
        return f"{SOURCE}:GatherElementsOpTest.{t} (RunTestWrapper<{t}> {call_text(t, call)})"
    return f"{SCATTER_SOURCE}:Scatter.{t} (RunTestWrapper<{t}> {call_text(t, call)}) [{tester[0]} {tester[1]}]"


def type_axis() -> dict[str, tuple[str, tuple]]:
    """Each typed case's name -> its T and what it is apart from T: the call (TIndex, dims, axis), and a scatter's
    tester. The 649 cases are 59 such calls, each in the 11 types."""
    gathers = {_name(t, call): (t, (call, None)) for t, _ in TYPES for call in CALLS}
    scatters = {
        _name(t, call, tester): (t, (call, tester))
        for t, _ in TYPES
        for call in SCATTER_CALLS
        for tester in SCATTER_TESTERS
    }
    return gathers | scatters


def indices(input_dims: tuple, indices_dims: tuple, axis: int) -> list[int]:
    """GetData's indices, the fixed ``std::rand()`` standing in: ``rand() % (dim * 2) - dim`` each."""
    dim, draws = input_dims[axis], rand()
    return [next(draws) % (dim * 2) - dim for _ in range(int(np.prod(indices_dims, dtype=np.int64)))]


def reference(input_dims: tuple, indices_dims: tuple, axis: int, input_data: list, indices_data: list) -> list:
    """GetData's expected output (contiguous indices), its loop as the test writes it."""
    rank = len(input_dims)
    input_strides, output_strides = _strides(input_dims), _strides(indices_dims)
    output = []
    for i in range(len(indices_data)):
        input_offset, remain = 0, i
        for j in range(rank):
            q = remain // output_strides[j]
            if j != axis:
                input_offset += q * input_strides[j]
            remain = remain % output_strides[j]
        index = indices_data[i]
        input_offset += (index + input_dims[axis] if index < 0 else index) * input_strides[axis]
        output.append(input_data[input_offset])
    return output


def specs() -> list[dict]:
    """The 231 cases as cases.json writes them (without DirectML's verdicts)."""
    cases = []
    for t, dtype in TYPES:
        for call in CALLS:
            index, input_dims, indices_dims, has_axis, axis = call
            new_axis = (axis or 0) + len(input_dims) * ((axis or 0) < 0)
            input_data = list(range(1, int(np.prod(input_dims)) + 1))  # ValueRange<T>(size, 1, 1): exact in every T
            drawn = indices(input_dims, indices_dims, new_axis)
            case = {
                "name": _name(t, call),
                "op": "GatherElements",
                "opset": 11,
                "attributes": {"axis": axis or 0},
                "data": {"dtype": dtype, "shape": list(input_dims), "values": {"range": [1, 1]}},
                "indices": {"dtype": INDEX_TYPES[index], "shape": list(indices_dims), "values": drawn},
                "expected": {
                    "shape": list(indices_dims),
                    "values": reference(input_dims, indices_dims, new_axis, input_data, drawn),
                },
            }
            if not has_axis:  # the test sets no axis: ONNX's default, 0
                del case["attributes"]
            cases.append(case)
    return cases


def _strides(dims: tuple) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 1, 0, -1):
        strides[i - 1] = dims[i] * strides[i]
    return strides


def scatter_reference(
    input_dims: tuple, indices_dims: tuple, axis: int, input_data: list, indices_data: list, dtype: str
) -> tuple[list, list]:
    """The scatter RunTest's updates and expected output, its loop as the test writes it: ``ValueRange<T>(size, 1,
    2)``, but an update of an element an earlier one wrote takes that one's value."""
    input_strides, indices_strides = _strides(input_dims), _strides(indices_dims)
    updates = _value_range(len(indices_data), 1, 2, dtype)
    output = list(input_data)
    for i, index in enumerate(indices_data):
        offset, remain = 0, i
        for j in range(len(input_dims)):
            pos = (index + input_dims[axis] if index < 0 else index) if j == axis else remain // indices_strides[j]
            offset += pos * input_strides[j]
            remain = remain % indices_strides[j]
        if output[offset] != input_data[offset]:
            updates[i] = output[offset]
        else:
            output[offset] = updates[i]
    return updates, output


def _value_range(count: int, start: int, step: int, dtype: str) -> list:
    """ORT's ``ValueRange<T>(count, start, step)``, accumulated in the type (int8 wraps), as Python numbers."""
    return np.add.accumulate(np.array([start] + [step] * (count - 1), dtype), dtype=dtype).tolist()


def scatter_specs() -> list[dict]:
    """The 418 scatter cases as cases.json writes them (without DirectML's verdicts)."""
    cases = []
    for t, dtype in TYPES:
        for call in SCATTER_CALLS:
            index, input_dims, indices_dims, has_axis, axis = call
            new_axis = (axis or 0) + len(input_dims) * ((axis or 0) < 0)
            input_data = _value_range(int(np.prod(input_dims)), 0, 2, dtype)
            drawn = indices(input_dims, indices_dims, new_axis)
            updates, output = scatter_reference(input_dims, indices_dims, new_axis, input_data, drawn, dtype)
            for op, opset in SCATTER_TESTERS:
                case = {
                    "name": _name(t, call, (op, opset)),
                    "op": op,
                    "opset": opset,
                    "attributes": {"axis": axis or 0},
                    "data": {"dtype": dtype, "shape": list(input_dims), "values": {"range": [0, 2]}},
                    "indices": {"dtype": INDEX_TYPES[index], "shape": list(indices_dims), "values": drawn},
                    "updates": {"dtype": dtype, "shape": list(indices_dims), "values": updates},
                    "expected": {"shape": list(input_dims), "values": output},
                }
                if not has_axis:  # the test sets no axis: ONNX's default, 0
                    del case["attributes"]
                cases.append(case)
    return cases
