"""What DirectML is known to do with a node the provider runs on it: fail, or compute otherwise than ONNX Runtime's CPU.

Each rule is one DirectML behaviour measured on real DirectML (ONNX Runtime 1.24.4, DirectML 1.15.4), stated once,
in ``known.arithmetic`` (what DirectML computes from values) or ``known.movement`` (what moves or shapes data), on the
framework here; ``tests/test_known.py`` runs each rule's repro there and holds the rule to it, and to what ``check``
says of the repro. A rule looks at one node as ONNX holds it (its attributes, input and output types, constant
inputs, the nodes around it, the ranges ``graphs.ranges`` finds for its inputs). Where the behaviour depends on the
values a run brings, the rule says on which (``when``), which of the node's values tell (``reads``) and how to count
the elements of a run that meet it (``counter``); where the graph fixes those values so that none can, it is ruled
out, saying what rules it out. ``Known.measure`` holds such a flag to the values of a run.

Beside each rule stands what the ``dmlsim`` backend makes of it: a ``differs`` rule's emulation (the nodes, in
standard ONNX, that compute at the node what DirectML computes) or why it has none; a ``fails`` rule's ``Failure``
(DirectML's HRESULT and when it comes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
import onnx
from onnx import TensorProto

from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.placement.nodes import Failure
from onnx_gather.graphs.plumbing import DefUse, attribute
from onnx_gather.graphs.ranges import Range, Ranges
from onnx_gather.graphs.types import ValueType, numpy_type

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE})


class Kind(StrEnum):
    """What DirectML does at the node: fails (refuses the model, or the run), or computes otherwise than the CPU."""

    FAILS = "fails"
    DIFFERS = "differs"


FAILS, DIFFERS = Kind.FAILS, Kind.DIFFERS


class Status(StrEnum):
    """Whether a flag's condition holds: the graph fixes it (``MET`` without a run), a run's values meet it or not,
    nothing tells yet (``POSSIBLE``), or the graph rules it out."""

    MET = "met"
    NOT_MET = "not met"
    POSSIBLE = "possible"
    RULED_OUT = "ruled out"


# Given the values a flag reads (in the order of its ``reads``), how many elements of a run meet its condition.
Count = Callable[..., int]


@dataclass(frozen=True)
class Flag:
    """What a rule says at a node: what DirectML does; ``when``, the condition on a run's values ("" where the graph
    fixes it); ``ruled_out``, what of the graph excludes that condition; the values it reads and how it counts."""

    what: str
    when: str = ""
    ruled_out: str = ""
    reads: tuple[str, ...] = ()
    counter: Count | None = field(default=None, compare=False)
    failure: Failure | None = None  # a FAILS rule's


@dataclass(frozen=True)
class Known:
    """One known behaviour of DirectML at one node: which rule, ``kind``, what it does, and whether it happens:
    ``status`` (from the graph, or from a run's values: ``measure``) and, where a run met it, ``count``."""

    rule: str
    kind: Kind
    what: str
    when: str = ""
    ruled_out: str = ""
    reads: tuple[str, ...] = ()
    counter: Count | None = field(default=None, compare=False)
    measured: Status | None = None  # what a run's values say
    count: int | None = None  # the elements of the run that meet ``when``
    failure: Failure | None = None  # a FAILS rule's: how DirectML fails
    # A DIFFERS rule's: the emulation at this node (it emits, in standard ONNX, what DirectML computes there and
    # returns the value it writes: the node that makes that value is replaced), or why there is none
    emulation: Callable[[Emitter], str] | None = field(default=None, compare=False)
    unemulated: str = ""

    @property
    def status(self) -> Status:
        if self.measured is not None:
            return self.measured
        if self.ruled_out:
            return Status.RULED_OUT
        return Status.POSSIBLE if self.when else Status.MET

    @property
    def certain(self) -> bool:
        """The graph alone makes it happen."""
        return not self.when and not self.ruled_out

    def measure(self, values: Mapping[str, np.ndarray]) -> Known:
        """The flag held to a run's ``values`` (by name): met with its count, not met, or still possible where the
        run did not show a value it reads (or it reads none); a flag the graph rules out stays so."""
        if self.certain or self.ruled_out or self.counter is None or any(name not in values for name in self.reads):
            return self
        count = int(self.counter(*(np.asarray(values[name]) for name in self.reads)))
        return replace(self, measured=Status.MET if count else Status.NOT_MET, count=count)


@dataclass(frozen=True)
class Node:
    """One node as the rules see it: the node, its graph's value types, who makes and takes its values, the ranges
    of its graph's values, and the opset."""

    node: onnx.NodeProto
    types: Mapping[str, ValueType]
    graph: DefUse
    graph_outputs: frozenset[str]
    opset: int  # the default domain's version in force where the node is
    ranges: Ranges

    def since(self) -> int | None:
        """The since-version of the node's standard operator at its opset (which kernel the provider takes)."""
        try:
            return onnx.defs.get_schema(self.node.op_type, self.opset, "").since_version
        except onnx.defs.SchemaError:
            return None

    def attribute(self, name: str, default: object = None) -> object:
        return attribute(self.node, name, default)

    def type_of(self, position: int, outputs: bool = False) -> ValueType | None:
        names = self.node.output if outputs else self.node.input
        return self.types.get(names[position]) if position < len(names) and names[position] else None

    def elem_type(self, position: int, outputs: bool = False) -> int | None:
        value = self.type_of(position, outputs)
        return None if value is None else value.elem_type

    def constant(self, position: int) -> np.ndarray | None:
        return self.graph.constant(self.node.input[position]) if position < len(self.node.input) else None

    def input(self, position: int) -> str:
        return self.node.input[position] if position < len(self.node.input) else ""

    def range(self, position: int) -> Range:
        return self.ranges.of(self.input(position))

    def static(self, position: int) -> tuple[int, ...] | None:
        """The dims of input ``position`` where every one is known."""
        value = self.type_of(position)
        if value is None or value.dims is None or not all(isinstance(d, int) for d in value.dims):
            return None
        return tuple(value.dims)


# A DIFFERS rule's emulation at a node: it emits what DirectML computes there and returns the value it writes.
Emulate = Callable[[Node, Emitter], str]


@dataclass(frozen=True)
class Rule:
    """One measured behaviour: its name, ``FAILS`` or ``DIFFERS``, the operators it concerns, the test of a node
    (a ``Known``, or None where the rule does not apply), and for a DIFFERS rule its emulation or why none."""

    name: str
    kind: Kind
    op_types: frozenset[str]
    test: Callable[[Node], Known | None]
    emulated: Emulate | str | None = None


RULES: list[Rule] = []


def _rule(
    name: str, kind: Kind, *op_types: str, emulated: Emulate | str | None = None
) -> Callable[[Callable[[Node], Flag | None]], Callable]:
    """Register a rule whose function gives its ``Flag`` at the node (None: the rule does not apply); a DIFFERS
    rule's ``emulated`` is its emulation, or why it has none."""

    def register(function: Callable[[Node], Flag | None]) -> Callable:
        def test(node: Node) -> Known | None:
            flag = function(node)
            if flag is None:
                return None
            emulation = (lambda emit: emulated(node, emit)) if callable(emulated) else None
            unemulated = emulated if isinstance(emulated, str) else ""
            return Known(
                name,
                kind,
                flag.what,
                flag.when,
                flag.ruled_out,
                flag.reads,
                flag.counter,
                failure=flag.failure,
                emulation=emulation,
                unemulated=unemulated,
            )

        RULES.append(Rule(name, kind, frozenset(op_types), test, emulated))
        return function

    return register


def known(node: Node) -> list[Known]:
    """Every known behaviour of DirectML at ``node``, a standard-domain node the provider runs on DirectML, the
    ruled-out ones too."""
    if node.node.domain not in ("", "ai.onnx", "com.microsoft"):
        return []
    found = (rule.test(node) for rule in RULES if node.node.op_type in rule.op_types)
    return [k for k in found if k is not None]


def rule_names() -> Iterator[str]:
    return (rule.name for rule in RULES)


def _elements(array: np.ndarray) -> int:
    return int(np.count_nonzero(array))


def _np_type(elem_type: int | None) -> np.dtype:
    return numpy_type(elem_type or TensorProto.FLOAT)


def _again(node: Node, emit: Emitter, step: str, **attributes: object) -> str:
    """The node itself once more (its ``attributes`` changed), writing a fresh value: what an emulation builds on."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node.node)
    copy.output[0] = emit.names.fresh(f"{emit.prefix}/{step}")
    copy.name = emit.names.fresh(f"{emit.prefix}/{step}")
    kept = [a for a in copy.attribute if a.name not in attributes]
    del copy.attribute[:]
    copy.attribute.extend([*kept, *(onnx.helper.make_attribute(k, v) for k, v in attributes.items())])
    emit.nodes.append(copy)
    return copy.output[0]


_CASES = "(docs/node-suite.md)"


_OWN_ALGORITHM = "DirectML's own algorithm, which no measurement has stated yet: the emulation computes ONNX's"


# The rules, each registered (``_rule``) as its module is read.
from onnx_gather.graphs.placement.known import arithmetic, movement  # noqa: E402, F401
