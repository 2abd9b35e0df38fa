"""Helpers shared by the tests: cached sessions for one DML or native node, exact comparison, a runner's processes."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import pickle
import signal
import struct
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

import onnx_gather
from onnx_gather.graphs.emit import single_node_model


def _single_thread_options() -> onnxruntime.SessionOptions:
    # The tests cache hundreds of one-node sessions; tearing down a session's thread pool takes ~30 ms.
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return options


@functools.cache
def _dml_session(op_type: str, input_dtype: str, indices_dtype: str, attributes: tuple) -> onnx_gather.InferenceSession:
    model = single_node_model(op_type, np.dtype(input_dtype), np.dtype(indices_dtype), **dict(attributes))
    return onnx_gather.InferenceSession(model, _single_thread_options())


def run_dml(op_type: str, input: np.ndarray, indices: np.ndarray, **attributes) -> np.ndarray:
    """Run one DmlGather or DmlGatherElements node in ONNX Runtime; ``out_of_bounds`` defaults to clamp."""
    attributes.setdefault("out_of_bounds", "clamp")
    session = _dml_session(op_type, input.dtype.str, indices.dtype.str, tuple(sorted(attributes.items())))
    return session.run(None, {"input": input, "indices": indices})[0]


def run_dml_scatter(
    op_type: str, input: np.ndarray, indices: np.ndarray, updates: np.ndarray, **attributes
) -> np.ndarray:
    """Run one DmlScatterElements or DmlScatterNd node in ONNX Runtime; ``out_of_bounds`` defaults to directml,
    ``duplicates`` to error."""
    attributes.setdefault("out_of_bounds", "directml")
    attributes.setdefault("duplicates", "error")
    session = _dml_session(op_type, input.dtype.str, indices.dtype.str, tuple(sorted(attributes.items())))
    return session.run(None, {"input": input, "indices": indices, "updates": updates})[0]


@functools.cache
def _native_session(op_type: str, input_dtype: str, indices_dtype: str, axis: int) -> onnxruntime.InferenceSession:
    model = single_node_model(op_type, np.dtype(input_dtype), np.dtype(indices_dtype), domain="", axis=axis)
    return onnxruntime.InferenceSession(
        model.SerializeToString(), _single_thread_options(), providers=["CPUExecutionProvider"]
    )


def run_native(op_type: str, data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """Run ONNX Runtime's own Gather or GatherElements (which takes only INT32 and INT64 indices)."""
    if indices.dtype.kind == "u":
        indices = indices.astype(np.int64)
    session = _native_session(op_type, data.dtype.str, indices.dtype.str, axis)
    return session.run(None, {"input": data, "indices": indices})[0]


def assert_identical(actual: np.ndarray, expected: np.ndarray, canonical_nans: bool = False) -> None:
    """Same type, same shape, same bytes: a gather moves values and never rounds.

    ``canonical_nans``: FLOAT16 carried through FLOAT32 by ONNX Runtime's Cast loses NaN payloads (docs/ops.md,
    known deviations); there a NaN must meet a NaN, and every other value its exact bits.
    """
    assert actual.dtype == expected.dtype, f"type {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "OU":  # strings: equal, element by element
        assert actual.tolist() == expected.tolist(), f"values differ:\n{actual}\n!=\n{expected}"
        return
    if canonical_nans and actual.dtype.kind == "f":
        nans = np.isnan(expected)
        assert np.array_equal(np.isnan(actual), nans), f"NaNs differ:\n{actual}\n!=\n{expected}"
        actual, expected = actual[~nans], expected[~nans]
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes(), (
        f"values differ:\n{actual}\n!=\n{expected}"
    )


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Random bit patterns of ``dtype``: NaN payloads, infinities, -0.0 and subnormals included."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def _unoptimized() -> onnxruntime.SessionOptions:
    # Graph optimizations may fuse differently around a changed node; without them every float op computes
    # the same way in the original and the converted model, so outputs can be compared bit for bit.
    options = _single_thread_options()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def run_model(model, feeds: dict, custom_ops: bool = False) -> list[np.ndarray]:
    """Run a ModelProto (or path) in ONNX Runtime: plainly, or with the custom ops registered."""
    source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    if custom_ops:
        return onnx_gather.InferenceSession(source, _unoptimized()).run(None, feeds)
    session = onnxruntime.InferenceSession(source, _unoptimized(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_all_identical(actual: list[np.ndarray], expected: list[np.ndarray], canonical_nans: bool = False) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert_identical(np.asarray(a), np.asarray(e), canonical_nans)


# Tables the real-DirectML tests print after the run (pytest_terminal_summary), in the order they were made.
SUMMARIES: list[str] = []
# Tables counted across many tests, by title: line -> count. Under xdist each worker counts the tests it ran; the
# controller adds the workers' counts up and prints each table once, after SUMMARIES.
TALLIES: defaultdict[str, Counter] = defaultdict(Counter)


def pytest_configure(config):
    # A shell that starts the suite in the background (`cmd &`, nohup) hands it SIGINT ignored, and every process a
    # test starts inherits that: the Ctrl-C tests would see no interrupt. They test Python's own handling.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if getattr(config, "cache", None) is not None:  # not under -p no:cacheprovider
        _keep_node_test_cases(Path(config.cache.mkdir("onnx-node-test-cases")))


def _keep_node_test_cases(folder: Path) -> None:
    """ONNX's node test cases (``collect_testcases``: its generators compute every expected output, some 5 s in each
    process that collects the tests) made once per installed onnx and kept in pytest's cache folder, a file named by
    onnx's version and its generators' files; every caller of ``collect_testcases`` gets them from there."""
    import onnx
    from onnx.backend.test.case import node

    generators = sorted(Path(node.__file__).parent.rglob("*.py"))
    stamp = hashlib.sha256(repr([onnx.__version__, *((p.name, p.stat().st_mtime_ns) for p in generators)]).encode())
    kept = folder / f"{stamp.hexdigest()[:16]}.pickle"
    collect = node.collect_testcases

    @functools.cache
    def cases() -> list:
        with contextlib.suppress(OSError, pickle.UnpicklingError, EOFError):
            return pickle.loads(kept.read_bytes())
        made = collect()
        for old in folder.glob("*.pickle"):
            old.unlink(missing_ok=True)
        temporary = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
        temporary.write_bytes(pickle.dumps(made))
        os.replace(temporary, kept)  # two workers writing at once: the same cases, one file
        return made

    def collect_testcases(op_type: str | None = None) -> list:
        return collect(op_type) if op_type is not None else cases()

    node.collect_testcases = collect_testcases


def pytest_sessionfinish(session):
    """In an xdist worker: hand the tables it made to the controller, which prints them (pytest_testnodedown)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["summaries"] = list(SUMMARIES)
        output["tallies"] = {title: dict(counts) for title, counts in TALLIES.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """In the controller of xdist: the tables a worker made, printed with this process's own; its tallies added."""
    output = getattr(node, "workeroutput", {})
    SUMMARIES.extend(output.get("summaries", []))
    for title, counts in output.get("tallies", {}).items():
        TALLIES[title].update(counts)


def pytest_terminal_summary(terminalreporter, config):
    seed = config.getoption("randomly_seed", default=None)  # pytest-randomly's header is hidden by -q
    if seed is not None:
        terminalreporter.write_line(f"Tests ran in random order: --randomly-seed={seed} repeats it.")
    tables = [
        f"{title}:\n" + "\n".join(f"  {line} {n}" for line, n in sorted(c.items())) for title, c in TALLIES.items() if c
    ]
    for text in SUMMARIES + tables:
        terminalreporter.write_sep("-", "real DirectML")
        terminalreporter.write_line(text)


_RUNNING: list = []  # the test being set up or run (pytest_runtest_setup): require_directml checks its marker


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _RUNNING[:] = [item]
    if item.get_closest_marker("openvino") is not None:
        _require_openvino()


def _missing(reason: str) -> None:
    """Skip for ``reason``; in CI (CI=true), which installs everything the tests need, fail."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"in CI, {reason}")
    pytest.skip(reason)


def require_chromium() -> str:
    """The path of headless Chromium (Debian's ``chromium``, which ``onnx-gather setup-directml`` installs for the
    tests of the HTML pages); skipped where it is not there, failing in CI."""
    import shutil

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        _missing("Chromium is not installed (the HTML pages' browser tests): apt-get install chromium")
    return found


def _require_openvino() -> None:
    """A test marked ``openvino`` runs the openvino backend: skipped where the openvino extra is not installed."""
    from onnx_gather.runtime import backends

    reason = backends.create("openvino").unavailable()
    if reason is not None:
        _missing(reason)


def require_directml(wine: bool = False) -> None:
    """Skip where real DirectML is not there; in CI (CI=true), where it is set up, fail. Every test that calls this
    is marked ``directml`` (the Windows workflow runs those: ``pytest -m directml``), or fails saying so.

    On Linux real DirectML is the Wine set-up (``onnx-gather setup-directml``); on Windows it is the installed
    onnxruntime-directml's DmlExecutionProvider, and a test of the Wine set-up itself (``wine``: the runner,
    direct.exe, the set-up) is skipped there."""
    test = _RUNNING[0] if _RUNNING else None
    if test is not None and test.get_closest_marker("directml") is None:
        pytest.fail(
            f"{test.nodeid} needs real DirectML: mark it @pytest.mark.directml (the Windows workflow runs those)"
        )
    if sys.platform == "win32":
        if wine:
            pytest.skip("a test of real DirectML's Linux set-up (Wine, the runner, direct.exe): not on Windows")
        if "DmlExecutionProvider" not in onnxruntime.get_available_providers():
            _missing("ONNX Runtime's DmlExecutionProvider is not available: install onnxruntime-directml==1.24.4")
        return
    from onnx_gather.directml.layout import SETUP_COMMAND, Layout

    problems = Layout.default().problems()
    if problems:
        _missing(f"real DirectML is not set up ({'; '.join(problems)}): run `{SETUP_COMMAND}` as root")


# DirectML's 16-bit data types: it runs DXBC kernels for them on the set-up's default device, DXIL cs_6_2 ones on its
# native 16-bit device (docs/semantics.md 4.3); each kernel is held against the prediction.
SIXTEEN_BIT = ("FLOAT16", "INT16", "UINT16")
KERNEL_OF_16_BIT_DATA = {"vkd3d-1.14": "dxbc", "vkd3d-1.14-native16": "dxil"}


def dump_shaders(monkeypatch, folder: Path) -> Path:
    """Have vkd3d in every runner started after this write each shader it compiles into ``folder`` (made here)."""
    folder.mkdir()
    monkeypatch.setenv("VKD3D_SHADER_DUMP_PATH", "Z:" + str(folder).replace("/", "\\"))
    return folder


def shaders(folder: Path) -> dict[str, set[str]]:
    """The shaders dumped into ``folder``, by source kind: "dxbc" (shader model 5) and "dxil" (6)."""
    return {kind: {p.name for p in folder.glob(f"*-source.{kind}")} for kind in ("dxbc", "dxil")}


# inotify's events of a folder's entries that change what it holds, by name: not IN_ATTRIB, which a hard link made to
# a file from elsewhere also raises (its link count changes), nor reads.
_CHANGES = {
    0x2: "modified",
    0x8: "closed after writing",
    0x40: "moved out",
    0x80: "moved in",
    0x100: "created",
    0x200: "removed",
    0x4000: "events lost",
}


@contextlib.contextmanager
def watching(folder: Path) -> Iterator[list[str]]:
    """What is created, written, moved or removed in ``folder`` while the block runs, each as inotify reports it
    ("created .model.onnx.og-....tmp.onnx"), also a file made and removed again meanwhile; the list is filled when
    the block ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    handle = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if handle < 0 or libc.inotify_add_watch(handle, os.fsencode(folder), sum(_CHANGES)) < 0:
        raise OSError(ctypes.get_errno(), f"inotify cannot watch {folder}")
    events: list[str] = []
    try:
        yield events
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(handle, 1 << 16):
                data += chunk
        while data:
            _, mask, _, length = struct.unpack_from("iIII", data)
            name = data[16 : 16 + length].rstrip(b"\0").decode()
            events += [f"{what} {name}" for bit, what in _CHANGES.items() if mask & bit]
            data = data[16 + length :]
    finally:
        os.close(handle)


@pytest.fixture
def no_directml(tmp_path, monkeypatch):
    """A machine without real DirectML: its cache folder points at an empty one (the dml backend is skipped)."""
    monkeypatch.setenv("ONNX_GATHER_DIRECTML_HOME", str(tmp_path / "no-directml"))


@pytest.fixture(scope="session")
def directml():
    """One runner of real DirectML for the whole test session (Wine and Xvfb started once, ended at the end)."""
    require_directml(wine=True)
    from onnx_gather.directml.worker import Runner

    with Runner() as runner:
        yield runner


def processes_mentioning(text: str) -> list[int]:
    """Processes whose environment or command line mentions ``text`` (a runner's private folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            blob = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if status != "Z" and text.encode() in blob:
            found.append(int(entry.name))
    return found


def runner_children(runner) -> tuple[list[int], str]:
    """A running worker.Runner's Wine and Xvfb processes and its private folder, seen alive."""
    folder = str(runner._folder)
    pids = [runner._wine.pid, runner._xvfb.pid]
    assert processes_mentioning(folder), "the runner's processes should be visible while it runs"
    return pids, folder


def assert_runner_ended(pids: list[int], folder: str) -> None:
    """Nothing of a runner is left: its processes, its Wine server and services, its private folder."""
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert processes_mentioning(folder) == [], "a Wine server, Wine service or Xvfb of the runner is left"
    assert not Path(folder).exists()


def real_placement(model) -> tuple[dict[str, set[str]], bool]:
    """Where real DirectML's provider puts each node that keeps its name after ONNX Runtime's optimizations, by the
    node's name (subgraphs' nodes too), and whether ONNX Runtime listed the nodes (it lists them only when it splits
    the model between providers)."""
    from onnx_gather.directml import worker
    from onnx_gather.runtime import backends

    named = backends._named_nodes(model)  # as the dml backend names unnamed nodes: 'Gather #12'
    loaded = worker.shared().load(named, fallback=True, fuse=False, data=model.folder)  # fusion off: every node
    worker.shared().free(loaded)
    real: dict[str, set[str]] = {}
    for provider, entries in loaded.placement.items():
        for entry in entries:
            name = entry.partition(" (")[2].removesuffix(")")
            real.setdefault(name, set()).add({"DmlExecutionProvider": "DirectML"}.get(provider, "CPU"))
    return real, "CPUExecutionProvider" in loaded.placed
