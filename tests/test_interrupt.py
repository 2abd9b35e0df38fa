"""Ctrl-C while the custom ops run: real processes, real SIGINTs, each sent once the child is inside the ops.

Raised inside an op (or in the bridge's own call into Python), a KeyboardInterrupt aborted the process ("terminate
called after throwing an instance of 'pybind11::error_already_set'", exit 134) or became the op's error, and parity
went on to the next backend. Now the run stops before its next node: the command line ends with one line and exit
130, and ``onnx_gather.InferenceSession.run`` raises KeyboardInterrupt.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import processes_mentioning, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnx_gather
from onnx_gather.runtime import ops

pytestmark = pytest.mark.slow  # real processes and signals, a second or two each

# A chain of Gathers over a 2000 x n float input: at n = 2000 some 4 ms a node here (16 MB moved; at least 1.5 ms on
# any machine), so 1 to 3 s in all, far longer than the longest delay before the signal; a stopped run ends within a
# node. (More nodes would make the conversion and the session the slow part: some 9 s to the first op for 4,000.)
NODES, ROWS = 600, 2000
INSIDE = "inside the custom ops"
CPU_STARTED = "the cpu backend started"

# Prepended to each child's code: it says on stderr when the first custom op of each run starts (so the signal is
# sent while the ops run, never before) and when the cpu backend starts.
_WATCH = f"""
import os, signal, sys
import numpy as np
from onnx_gather.runtime import backends, ops

call, cpu_run, watched = ops._Operator.call, backends.Cpu.run, []

def watched_call(self, *args):
    if ops._state.run not in watched:
        watched.append(ops._state.run)
        os.write(2, b"{INSIDE}\\n")
    return call(self, *args)

def watched_cpu_run(self, *args):
    os.write(2, b"{CPU_STARTED}\\n")
    return cpu_run(self, *args)

ops._Operator.call, backends.Cpu.run = watched_call, watched_cpu_run
"""


def _chain(nodes: int = NODES) -> onnx.ModelProto:
    """``nodes`` Gathers one after the other, each reordering the rows of the one before (the indices a constant)."""
    order = numpy_helper.from_array(np.random.default_rng(0).permutation(ROWS).astype(np.int64), "order")
    names = ["x", *(f"t{i}" for i in range(nodes - 1)), "y"]
    graph = h.make_graph(
        [h.make_node("Gather", [names[i], "order"], [names[i + 1]], name=f"g{i}", axis=0) for i in range(nodes)],
        "chain",
        [h.make_tensor_value_info("x", T.FLOAT, [ROWS, "n"])],
        [h.make_tensor_value_info("y", T.FLOAT, [ROWS, "n"])],
        [order],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=10)


def _interrupted(command: list[str], delay: float, run: int = 1, **popen: Any) -> tuple[int, str, str]:
    """Run ``command``, send it SIGINT ``delay`` seconds after it says its ``run``-th run is inside the custom ops;
    its exit code, stdout and stderr (from that line on)."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        said: list[str] = []
        while said.count(f"{INSIDE}\n") < run:
            said.append(child.stderr.readline())
            assert said[-1], f"the child ended before its ops ran: {''.join(said)}"
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    return child.returncode, out, err


@pytest.fixture(scope="module")
def chain_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("chain")
    onnx.save(_chain(), folder / "chain.onnx")
    np.savez(folder / "chain.npz", x=np.random.default_rng(1).random((ROWS, ROWS), np.float32))
    return folder / "chain.onnx", folder / "chain.npz"


@pytest.mark.parametrize("delay", [0, 0.01, 0.05, 0.2, 0.4])
def test_ctrl_c_during_pyop_ends_parity_with_one_line_and_130(chain_files, delay):
    model, inputs = chain_files
    code = _WATCH + "from onnx_gather.app import entry\nsys.exit(entry.main())"
    command = [sys.executable, "-c", code, "parity", str(model), "--backends", "pyop,cpu", "--inputs", str(inputs)]
    started = time.monotonic()
    returncode, out, err = _interrupted(command, delay)
    assert (returncode, out, err) == (130, "", "onnx-gather: interrupted\n"), err  # no op error, no abort, no cpu
    assert time.monotonic() - started < 30


@pytest.mark.directml
def test_ctrl_c_during_pyop_after_a_dml_run_ends_parity_and_wine_with_it(tmp_path):
    # The first model runs on pyop, then on real DirectML (Wine stays up for the next model); Ctrl-C comes while the
    # second runs on pyop.
    require_directml(wine=True)
    folder, private = tmp_path / "zoo", tmp_path / "tmp"
    folder.mkdir()
    private.mkdir()
    onnx.save(_chain(1), folder / "a.onnx")
    onnx.save(_chain(), folder / "b.onnx")
    code = _WATCH + "from onnx_gather.app import entry\nsys.exit(entry.main())"
    command = [sys.executable, "-c", code, "parity", str(folder), "--backends", "dml", "--shape", f"x:{ROWS}x{ROWS}"]
    environment = {**os.environ, "TMPDIR": str(private)}
    returncode, out, err = _interrupted(command, 0.1, run=2, env=environment)
    assert (returncode, err) == (130, "onnx-gather: interrupted\n"), err
    assert re.search(r"a\.onnx.*\n(.*\n)*  dml +ok ", out) and "b.onnx" not in out  # Wine ran the first
    runners = [p for p in private.iterdir() if p.name != ".ses"]  # (ONNX Runtime 1.32's telemetry leaves .ses)
    assert runners == []
    assert processes_mentioning(str(private)) == [], "a Wine server, Wine service or Xvfb of the runner is left"


# The library: the child runs the chain in onnx_gather.InferenceSession with the SIGINT handler of ``handler``, says
# what ``run`` raised, then runs the session again on a narrow input (a few milliseconds).
_LIBRARY = """
import onnx, onnx_gather

class Stop(Exception):
    pass

def stop(signum, frame):
    raise Stop("by the user's handler")

def count(signum, frame):
    counted.append(signum)

counted = []
handlers = {"python": signal.default_int_handler, "raising": stop, "quiet": count}
handler = handlers[sys.argv[2]]
signal.signal(signal.SIGINT, handler)
session = onnx_gather.InferenceSession(onnx_gather.to_dml(onnx.load(sys.argv[1])))
x = np.random.default_rng(1).random((2000, 2000), np.float32)
try:
    session.run(None, {"x": x})
    print("the run ended")
except BaseException as error:
    print("run raised", type(error).__name__, error)
print("signals counted:", len(counted))
print("handler restored:", signal.getsignal(signal.SIGINT) is handler)
narrow = np.arange(2000, dtype=np.float32).reshape(2000, 1)
print("second run:", sorted(session.run(None, {"x": narrow})[0].ravel().tolist()) == narrow.ravel().tolist())
"""


@pytest.mark.parametrize(
    ("handler", "delay", "raised"),
    [
        ("python", 0, "run raised KeyboardInterrupt \n"),
        ("python", 0.05, "run raised KeyboardInterrupt \n"),
        ("python", 0.3, "run raised KeyboardInterrupt \n"),
        ("raising", 0.05, "run raised Stop by the user's handler\n"),
    ],
)
def test_ctrl_c_during_a_run_raises_from_run_and_the_session_runs_again(tmp_path, handler, delay, raised):
    onnx.save(_chain(), tmp_path / "chain.onnx")
    command = [sys.executable, "-c", _WATCH + _LIBRARY, str(tmp_path / "chain.onnx"), handler]
    returncode, out, err = _interrupted(command, delay)
    assert returncode == 0, err
    assert out == f"{raised}signals counted: 0\nhandler restored: True\nsecond run: True\n"
    # The second run's first op, and at most ONNX Runtime's warning on the empty output of an op skipped once the run
    # was stopped.
    assert [line for line in err.splitlines() if "[W:onnxruntime:" not in line] == [INSIDE], err


def test_a_sigint_handler_that_does_not_raise_lets_the_run_go_on(tmp_path):
    onnx.save(_chain(100), tmp_path / "chain.onnx")
    command = [sys.executable, "-c", _WATCH + _LIBRARY, str(tmp_path / "chain.onnx"), "quiet"]
    returncode, out, err = _interrupted(command, 0)
    assert (returncode, err) == (0, f"{INSIDE}\n")  # the second run's first op
    assert out == "the run ended\nsignals counted: 1\nhandler restored: True\nsecond run: True\n"


# In process, without signals: what an op raises that is not its error (KeyboardInterrupt, SystemExit).


@pytest.fixture
def interrupting_ops(monkeypatch):
    """The custom ops raise KeyboardInterrupt at their third call."""
    call, calls = ops._Operator.call, []

    def interrupting(self, *args):
        calls.append(self.op_type)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return call(self, *args)

    monkeypatch.setattr(ops._Operator, "call", interrupting)
    return calls


@pytest.mark.parametrize("given", [True, False], ids=["the caller's options", "the thread's"])
def test_an_interrupt_inside_an_op_is_raised_from_run_not_recorded_as_its_error(interrupting_ops, given):
    session = onnx_gather.InferenceSession(onnx_gather.to_dml(_chain(20)))
    options = onnxruntime.RunOptions() if given else None
    x = np.ones((ROWS, 2), np.float32)
    with pytest.raises(KeyboardInterrupt) as raised:
        session.run(None, {"x": x}, options)
    assert len(interrupting_ops) == 3  # no op ran after it: ONNX Runtime stopped before the next node
    assert "terminate flag" in str(raised.value.__context__)
    if given:
        assert options.terminate is False  # the caller's options serve again
    assert session.run(None, {"x": x}, options)[0].shape == (ROWS, 2)  # (run without options: the thread's serve)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_interrupt_inside_an_op_of_a_plain_session_is_logged_not_raised_into_the_bridge(interrupting_ops, caplog):
    model = onnx_gather.to_dml(_chain(3)).SerializeToString()
    session = onnxruntime.InferenceSession(model, onnx_gather.session_options(), providers=["CPUExecutionProvider"])
    output = session.run(None, {"x": np.ones((ROWS, 2), np.float32)})[0]
    assert output.shape == (0,)  # the third node's; the process goes on
    assert "DmlGather: KeyboardInterrupt outside onnx_gather.InferenceSession.run" in caplog.text
