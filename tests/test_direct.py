"""DirectML called directly (direct.exe, no ONNX Runtime): the operators' documented examples, refusals, the output
buffer read back whole, and the process ending like runner.exe's.

Skipped where real DirectML is not set up; in CI (CI=true) they fail instead.
"""

from __future__ import annotations

import io
import os
import signal
import time

import numpy as np
import pytest
from conftest import (
    KERNEL_OF_16_BIT_DATA,
    SIXTEEN_BIT,
    SUMMARIES,
    assert_runner_ended,
    dump_shaders,
    require_directml,
    runner_children,
    shaders,
)

from onnx_gather.app import cli
from onnx_gather.conformance import direct_door as direct_conformance
from onnx_gather.conformance import random_descs
from onnx_gather.core import predict
from onnx_gather.core.contract import DIRECTML_DTYPES, NUMPY_NAMES
from onnx_gather.core.descs import Case, DescOutcome, TensorDesc, from_buffer, to_buffer
from onnx_gather.directml import install, layout
from onnx_gather.directml.direct import DirectRunner
from onnx_gather.directml.process import RunnerError


@pytest.fixture(scope="module")
def direct():
    require_directml(wine=True)
    with DirectRunner() as runner:
        yield runner


def _case(operator: str, attributes: dict, data, indices, output_sizes, output: TensorDesc | None = None, fill=0xCD):
    """A case of packed tensors of the arrays' types and shapes (FLOAT32 data, UINT32 indices as in the pages)."""
    data, indices = np.asarray(data, np.float32), np.asarray(indices, np.uint32)
    input_desc = TensorDesc.of(NUMPY_NAMES[data.dtype], data.shape)
    indices_desc = TensorDesc.of(NUMPY_NAMES[indices.dtype], indices.shape)
    output = output or TensorDesc.of(NUMPY_NAMES[data.dtype], output_sizes)
    return Case(
        operator,
        attributes,
        input_desc,
        indices_desc,
        output,
        to_buffer(input_desc, data),
        to_buffer(indices_desc, indices),
        fill,
    )


def _output(outcome: DescOutcome, case: Case) -> list:
    assert outcome.refused is None, f"DirectML refused the case: {outcome.refused}"
    return from_buffer(case.output, outcome.output).tolist()


# DML_GATHER_OPERATOR_DESC's page, examples 1, 2, 4 and 5 (3 below): axis, index_dimensions, input, indices, output.
GATHER_EXAMPLES = [
    pytest.param(0, 1, [11, 12, 13, 14], [3, 1, 3, 0, 2], [14, 12, 14, 11, 13], id="1 1D remapping"),
    pytest.param(
        0, 1, [[1, 2], [3, 4], [5, 6]], [[0, 1, 1, 2]], [[1, 2], [3, 4], [3, 4], [5, 6]], id="2 concatenate rows"
    ),
    pytest.param(
        2,
        2,
        [[[1, 2, 3], [4, 5, 6], [7, 8, 9]]],
        [[[0, 2]]],
        [[[1, 3]], [[4, 6]], [[7, 9]]],
        id="4 nested indices axis 2",
    ),
    pytest.param(
        1,
        2,
        [[[1, 2], [3, 4], [5, 6]]],
        [[[0, 1], [1, 2]]],
        [[[1, 2], [3, 4]], [[3, 4], [5, 6]]],
        id="5 nested indices axis 1",
    ),
]


@pytest.mark.directml
@pytest.mark.parametrize(("axis", "index_dimensions", "data", "indices", "expected"), GATHER_EXAMPLES)
def test_dml_gather_gives_its_documented_examples(direct, axis, index_dimensions, data, indices, expected):
    attributes = {"axis": axis, "index_dimensions": index_dimensions}
    case = _case("GATHER", attributes, data, indices, np.shape(expected))
    assert _output(direct.run([case])[0], case) == expected


@pytest.mark.directml
def test_dml_gather_refuses_its_documented_example_3_as_printed_and_gives_it_with_a_leading_dimension(direct):
    # Printed: 2 dimensions, axis 1, index_dimensions 2, so C = {3} + {1,2} + {} = {3,1,2}. DirectML crops only
    # leading 1s of C to fit the dimension count: refused. With a leading 1 on every tensor, C = {1,3,1,2} crops to
    # {3,1,2}, and the values are the page's.
    printed = _case("GATHER", {"axis": 1, "index_dimensions": 2}, [[1, 2], [3, 4], [5, 6]], [[1, 0]], (3, 2))
    padded = _case("GATHER", {"axis": 2, "index_dimensions": 2}, [[[1, 2], [3, 4], [5, 6]]], [[[1, 0]]], (3, 1, 2))
    outcomes = direct.run([printed, padded])
    assert outcomes[0] == DescOutcome("create 0x80070057", None)
    assert _output(outcomes[1], padded) == [[[2, 1]], [[4, 3]], [[6, 5]]]


@pytest.mark.directml
def test_dml_gather_elements_gives_its_documented_example(direct):
    case = _case("GATHER_ELEMENTS", {"axis": 0}, [[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 2, 0], [2, 0, 0]], (2, 3))
    assert _output(direct.run([case])[0], case) == [[4, 8, 3], [7, 2, 3]]


@pytest.mark.directml
def test_dml_gather_nd1_gives_its_documented_examples(direct):
    names = ("input_dimension_count", "indices_dimension_count", "batch_dimension_count")
    remap = _case("GATHER_ND1", dict(zip(names, (2, 2, 0), strict=True)), [[0, 1], [2, 3]], [[1], [0]], (2, 2))
    batches = _case(
        "GATHER_ND1",
        dict(zip(names, (3, 3, 1), strict=True)),
        np.arange(12).reshape(1, 3, 2, 2),
        [[[[0, 0], [1, 1]], [[1, 1], [0, 0]], [[0, 1], [1, 0]]]],
        (1, 1, 3, 2),
    )
    outcomes = direct.run([remap, batches])
    assert _output(outcomes[0], remap) == [[2, 3], [0, 1]]
    assert _output(outcomes[1], batches) == [[[[0, 3], [7, 4], [9, 10]]]]


@pytest.mark.directml
def test_a_desc_directml_refuses_comes_back_as_its_stage_and_hresult_and_the_next_case_runs(direct):
    example_1 = ([11, 12, 13, 14], [3, 1, 3, 0, 2])
    attributes = {"axis": 0, "index_dimensions": 1}
    wrong_sizes = _case("GATHER", attributes, *example_1, (4,))  # 5 indices make 5 elements, not 4
    too_small = _case("GATHER", attributes, *example_1, (5,), TensorDesc("FLOAT32", (5,), None, 16))  # 20 needed
    good = _case("GATHER", attributes, *example_1, (5,))
    outcomes = direct.run([wrong_sizes, too_small, good])
    assert outcomes[:2] == [DescOutcome("create 0x80070057", None)] * 2
    assert _output(outcomes[2], good) == [14, 12, 14, 11, 13]


@pytest.mark.directml
def test_a_total_must_reach_the_extent_rounded_up_to_4_but_need_not_be_a_multiple_of_4(direct):
    # Five UINT8 values gathered from five: each extent is 5 bytes, 8 when rounded up.
    data, indices = TensorDesc("UINT8", (5,), None, 8), TensorDesc.of("UINT32", (5,))
    cases = [
        Case(
            "GATHER",
            {"axis": 0, "index_dimensions": 1},
            data,
            indices,
            TensorDesc("UINT8", (5,), None, total),
            to_buffer(data, np.arange(1, 6)),
            to_buffer(indices, np.array([4, 3, 2, 1, 0])),
        )
        for total in (5, 7, 8, 9)
    ]
    outcomes = direct.run(cases)
    assert [outcome.refused for outcome in outcomes] == ["create 0x80070057"] * 2 + [None] * 2
    assert outcomes[3].output == bytes([5, 4, 3, 2, 1]) + b"\xcd" * 4


@pytest.mark.directml
def test_the_output_buffer_comes_back_whole_and_bytes_not_written_keep_the_fill(direct):
    # Example 1 into every other FLOAT32 of a 40-byte buffer: the gaps and the 4 bytes past the last element stay.
    output = TensorDesc("FLOAT32", (5,), (2,), 40)
    case = _case("GATHER", {"axis": 0, "index_dimensions": 1}, [11, 12, 13, 14], [3, 1, 3, 0, 2], (5,), output, 0xAB)
    data = direct.run([case])[0].output
    assert from_buffer(output, data).tolist() == [14, 12, 14, 11, 13]
    elements = np.frombuffer(data, np.uint32)
    assert elements[1::2].tolist() == [0xABABABAB] * 5  # elements 1, 3, 5, 7 and the bytes 36..39


@pytest.mark.directml
def test_a_batch_of_cases_gives_each_its_own_output(direct):
    cases = [_case("GATHER", {"axis": 0, "index_dimensions": 1}, [11, 12, 13, 14], [k % 4], (1,)) for k in range(200)]
    direct.run(cases[:1])  # DirectML's shaders for this case compiled
    start = time.perf_counter()
    outcomes = direct.run(cases)
    seconds = time.perf_counter() - start
    assert [_output(outcome, case) for outcome, case in zip(outcomes, cases, strict=True)] == [
        [[11, 12, 13, 14][k % 4]] for k in range(200)
    ]
    milliseconds = 1000 * seconds / len(cases)
    SUMMARIES.append(
        f"direct.exe: {len(cases)} DML_GATHER cases in {seconds:.2f} s ({milliseconds:.1f} ms a case), "
        f"DirectML feature level {direct.feature_level}"
    )


@pytest.mark.directml
def test_a_direct_runner_past_its_time_limit_is_ended_with_wine_and_xvfb():
    require_directml(wine=True)
    runner = DirectRunner(timeout=0.5)
    runner.runner.start()
    pids, folder = runner_children(runner.runner)
    os.kill(runner.runner._wine.pid, signal.SIGSTOP)  # stopped, it cannot answer however fast the machine is
    case = _case("GATHER", {"axis": 0, "index_dimensions": 1}, [11, 12, 13, 14], [3, 1, 3, 0, 2], (5,))
    with pytest.raises(RunnerError, match=r"run of 1 case: no answer within 0.5 s; Wine and Xvfb were ended"):
        runner.run([case])
    assert_runner_ended(pids, folder)
    assert not runner.runner.running


@pytest.mark.directml
def test_check_runs_a_case_through_direct_exe(capsys):
    require_directml(wine=True)
    assert cli.main(["setup-directml", "--check"]) == 0
    assert "direct: a DML_GATHER ran on DirectML called directly (direct.exe) in" in capsys.readouterr().out


@pytest.mark.directml
def test_a_changed_direct_c_must_be_rebuilt(monkeypatch):
    require_directml(wine=True)
    where = layout.Layout.default()
    source = layout.program_source

    def changed(name: str) -> bytes:
        return source(name) + (b"\n" if name == "direct" else b"")

    monkeypatch.setattr(layout, "program_source", changed)
    assert where.problems() == [f"direct.exe is not built from this version's direct.c and protocol.h in {where.bin}"]


@pytest.mark.directml
def test_each_program_is_compiled_with_protocol_h_into_its_exe_alone(tmp_path):
    require_directml(wine=True)  # the set-up's compiler
    out = io.StringIO()
    for name in layout.PROGRAMS:
        install._compile(tmp_path, name, out)
        assert (tmp_path / f"{name}.exe").read_bytes()[:2] == b"MZ"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{name}.exe" for name in layout.PROGRAMS)
    lines = [f"  {name}.exe: compiled from {name}.c and protocol.h" for name in layout.PROGRAMS]
    assert out.getvalue().splitlines() == lines


def test_a_case_states_what_is_wrong_with_it():
    desc = TensorDesc.of("FLOAT32", (4,))
    with pytest.raises(ValueError, match=r"GATHER takes the attributes axis, index_dimensions, not \['axis'\]"):
        Case("GATHER", {"axis": 0}, desc, desc, desc, bytes(16), bytes(16))
    with pytest.raises(ValueError, match="input_bytes holds 15 bytes; its desc's total is 16"):
        Case("GATHER_ELEMENTS", {"axis": 0}, desc, desc, desc, bytes(15), bytes(16))


# --- conformance over the whole domain ------------------------------------------------------------------------------

CONFORMANCE_SEED, CONFORMANCE_COUNT = 20261123, 3000


@pytest.mark.directml
def test_conformance_every_random_desc_is_predicted_bit_for_bit_and_the_custom_ops_agree(direct):
    # 3,000 random descs over the whole domain (random_descs): DirectML's verdict and whole output buffer are the
    # prediction's, bit for bit, and the custom ops compute every case laid out as ONNX Runtime's provider lays
    # tensors out. "Not predicted" descs (no rule found; docs/semantics.md section 7 lists them) are counted apart.
    cases = random_descs.random_cases(CONFORMANCE_SEED, CONFORMANCE_COUNT)
    run = direct_conformance.run_cases(direct, cases)
    table = direct_conformance.results_table(run)
    kinds = {(r.case.operator, r.kind) for r in run.results}
    assert {(o, k) for o in direct_conformance.OPERATORS for k in ("refused", "in range", "out of bounds")} <= kinds
    assert {len(r.case.input.sizes) for r in run.results if r.kind != "refused"} == set(range(1, 9))
    accepted = [r.case for r in run.results if r.kind in ("in range", "out of bounds")]
    assert {c.input.dtype for c in accepted} == set(DIRECTML_DTYPES)
    assert {c.indices.dtype for c in accepted} == {"INT32", "INT64", "UINT32", "UINT64"}
    assert any(c.input.strides is not None and 0 in c.input.strides for c in accepted)  # broadcast strides
    assert any(
        c.input.total_bytes > TensorDesc.of(c.input.dtype, c.input.sizes, c.input.strides).total_bytes for c in accepted
    )  # slack
    carried = sum(r.custom_ops is not None for r in run.results)
    unpredicted = sum(r.predicted is None for r in run.results)
    SUMMARIES.append(
        f"Conformance through DirectML called directly, seed {CONFORMANCE_SEED}: {len(cases)} random descs "
        f"({run.seconds:.1f} s on DirectML), {unpredicted} not predicted, the custom ops on {carried}:\n{table}"
    )
    assert unpredicted == 0
    bad = run.disagreements
    assert not bad, f"{len(bad)} cases differ, the first: {bad[0].case}"


@pytest.mark.directml
@pytest.mark.parametrize("stack", list(KERNEL_OF_16_BIT_DATA))
def test_16_bit_descs_are_predicted_bit_for_bit_on_the_dxbc_and_on_the_dxil_kernel(stack, tmp_path, monkeypatch):
    # The same random FLOAT16, INT16 and UINT16 descs on the default device and on the native 16-bit one. The shaders
    # DirectML compiles once its device is made are its own; every shader after them, the gathers', is of the
    # stack's kind: DXBC on the default device, DXIL (cs_6_2) on the native 16-bit one.
    require_directml(wine=True)
    monkeypatch.setenv(layout.D3D12_VARIABLE, stack)
    dumps = dump_shaders(monkeypatch, tmp_path / "shaders")
    cases = random_descs.random_cases(CONFORMANCE_SEED + 1, 800, SIXTEEN_BIT)
    with DirectRunner() as runner:
        own = shaders(dumps)
        run = direct_conformance.run_cases(runner, cases)
    gathers = {kind: names - own[kind] for kind, names in shaders(dumps).items()}
    kind = KERNEL_OF_16_BIT_DATA[stack]
    assert {k for k, names in gathers.items() if names} == {kind}, gathers
    accepted = [r.case for r in run.results if r.kind in ("in range", "out of bounds")]
    assert {(c.operator, c.input.dtype) for c in accepted} == {
        (o, t) for o in direct_conformance.OPERATORS for t in SIXTEEN_BIT
    }
    unpredicted = sum(r.predicted is None for r in run.results)
    SUMMARIES.append(
        f"16-bit descs through DirectML called directly on {stack}: {len(cases)} ({run.seconds:.1f} s on DirectML), "
        f"{len(gathers[kind])} {kind.upper()} gather kernels, {unpredicted} not predicted:\n"
        + direct_conformance.results_table(run)
    )
    assert unpredicted < len(cases) // 50
    bad = run.disagreements
    assert not bad, f"{len(bad)} cases differ, the first: {bad[0].case}"


@pytest.mark.directml
def test_the_examples_of_docs_section_8_on_directml_and_in_the_prediction(direct):
    def case(operator, attributes, data, indices, output_sizes, input_desc=None, input_bytes=None):
        data, indices = np.asarray(data), np.asarray(indices)
        x = input_desc or TensorDesc.of(NUMPY_NAMES[data.dtype], data.shape)
        j = TensorDesc.of(NUMPY_NAMES[indices.dtype], indices.shape)
        o = TensorDesc.of(x.dtype, output_sizes)
        raw = input_bytes if input_bytes is not None else to_buffer(x, data)
        return Case(operator, attributes, x, j, o, raw, to_buffer(j, indices), 0xCD)

    row = np.arange(10, 18, dtype=np.float32).reshape(1, 8)
    uint8 = TensorDesc("UINT8", (5,), None, 8)
    int64 = TensorDesc("INT64", (2,), None, 20)
    examples = [
        (
            case(
                "GATHER_ELEMENTS", {"axis": 1}, row, np.array([[2**64 - 2, 2**63 + 1, 2**32 + 1, 5]], np.uint64), (1, 4)
            ),
            [[16, 17, 11, 15]],
        ),
        (
            case("GATHER_ELEMENTS", {"axis": 1}, row, np.array([[2**32 - 2, 2**31 + 1, 1, 5]], np.uint32), (1, 4)),
            [[17, 17, 11, 15]],
        ),
        (
            case(
                "GATHER_ELEMENTS",
                {"axis": 0},
                np.arange(1, 6, dtype=np.uint8),
                np.array([5, 6, 7, 100], np.int32),
                (4,),
                uint8,
                bytes([1, 2, 3, 4, 5, 0xAA, 0xBB, 0xCC]),
            ),
            [0xAA, 0xBB, 0xCC, 0xCC],
        ),
        (
            case(
                "GATHER_ELEMENTS",
                {"axis": 0},
                np.array([7, 8], np.int64),
                np.array([1, 2, 100, -3], np.int64),
                (4,),
                int64,
                to_buffer(TensorDesc.of("INT64", (2,)), np.array([7, 8])) + b"\x11" * 4,
            ),
            [8, 0, 0, 0],
        ),
        (
            case(
                "GATHER_ND1",
                {"input_dimension_count": 2, "indices_dimension_count": 2, "batch_dimension_count": 1},
                np.arange(10, 16, dtype=np.float32).reshape(2, 3),
                np.array([[2], [0], [1]], np.int32),
                (1, 3),
            ),
            [[12, 13, 15]],
        ),
        (
            case(
                "GATHER_ND",
                {"input_dimension_count": 2, "indices_dimension_count": 2},
                np.arange(10, 14, dtype=np.float32).reshape(1, 4),
                np.array([[1]], np.int32),
                (1, 4),
            ),
            [[13, 13, 13, 13]],
        ),
        (
            case(
                "GATHER",
                {"axis": 1, "index_dimensions": 1},
                np.arange(6, dtype=np.float32).reshape(2, 1, 3),
                np.array([[[5]]], np.int32),
                (2, 1, 3),
                TensorDesc("FLOAT32", (2, 1, 3), (3, 0, 1), 24),
            ),
            [[[0, 1, 2]], [[3, 4, 5]]],
        ),
    ]
    outcomes = direct.run([c for c, _ in examples])
    for (c, expected), outcome in zip(examples, outcomes, strict=True):
        assert outcome.refused is None, c
        assert from_buffer(c.output, outcome.output).tolist() == expected, c
        assert predict.predict(c) == outcome
