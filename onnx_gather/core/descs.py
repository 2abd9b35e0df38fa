"""DirectML's gather and scatter operators as DirectML sees them: an operator desc with its DML_BUFFER_TENSOR_DESCs
(data type, sizes, strides in elements, TotalTensorSizeInBytes, base offset alignment) and the buffers' bytes.

``onnx_gather.directml.direct`` runs such cases on DirectML itself (direct.exe under Wine);
``onnx_gather.core.predict`` predicts what DirectML computes for them. This module imports no runtime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnx_gather.core.contract import DIRECTML_DTYPES
from onnx_gather.core.errors import UserError

ATTRIBUTES = {  # each operator's UINT fields after its three tensors, in the order of its desc
    "GATHER": ("axis", "index_dimensions"),
    "GATHER_ELEMENTS": ("axis",),
    "GATHER_ND": ("input_dimension_count", "indices_dimension_count"),
    "GATHER_ND1": ("input_dimension_count", "indices_dimension_count", "batch_dimension_count"),
    "SCATTER": ("axis",),
    "SCATTER_ND": ("input_dimension_count", "indices_dimension_count"),
}
SCATTERS = ("SCATTER", "SCATTER_ND")  # their tensors: input, indices, updates, output
MAX_DIMENSIONS = 16  # what direct.exe reads; DirectML takes 1 to 8 and refuses the rest itself


@dataclass(frozen=True)
class TensorDesc:
    """A DML_BUFFER_TENSOR_DESC: data type (DirectML's name), sizes, strides in elements (None: packed),
    TotalTensorSizeInBytes and GuaranteedBaseOffsetAlignment."""

    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    total_bytes: int
    alignment: int = 0

    @classmethod
    def of(cls, dtype: str, sizes: Sequence[int], strides: Sequence[int] | None = None) -> TensorDesc:
        """The desc with the smallest total DirectML accepts: the bytes up to the last element, rounded up to 4."""
        sizes = tuple(sizes)
        packed = cls(dtype, sizes, None if strides is None else tuple(strides), 0)
        return cls(dtype, sizes, packed.strides, -(-packed.extent // 4) * 4)

    @classmethod
    def provider(cls, dtype: str, sizes: Sequence[int]) -> TensorDesc:
        """The desc the custom ops read a tensor through, the one whose results equal what ONNX Runtime's DirectML
        provider was measured to compute (its source passes NULL strides; why it reads size-1 dims as stride 0 does
        is not known, perhaps its graph fusion):
        packed strides, 0 on every dimension of size 1, the smallest total."""
        sizes = tuple(sizes)
        steps = tuple(0 if size == 1 else step for size, step in zip(sizes, packed_strides(sizes), strict=True))
        return cls(dtype, sizes, steps, cls.of(dtype, sizes).total_bytes)

    @property
    def steps(self) -> tuple[int, ...]:
        """The strides in elements: the desc's, or the packed (row-major) ones where it has none."""
        return self.strides if self.strides is not None else packed_strides(self.sizes)

    @property
    def itemsize(self) -> int:
        return np.dtype(DIRECTML_DTYPES[self.dtype]).itemsize

    @property
    def extent(self) -> int:
        """Bytes from the buffer's start to the end of the last element, in exact arithmetic (0: no element)."""
        if not all(self.sizes):
            return 0
        return (sum((size - 1) * step for size, step in zip(self.sizes, self.steps, strict=True)) + 1) * self.itemsize

    def text(self) -> str:
        """The desc as direct.exe reads it in desc.txt."""
        strides = f"{len(self.strides)} {' '.join(map(str, self.strides))}" if self.strides is not None else "0"
        return (
            f"tensor {self.dtype} {len(self.sizes)} {' '.join(map(str, self.sizes))} strides {strides} "
            f"total {self.total_bytes} align {self.alignment}"
        )


def packed_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements for ``sizes``."""
    return tuple(math.prod(sizes[d + 1 :]) for d in range(len(sizes)))


def _view(desc: TensorDesc, buffer: np.ndarray) -> np.ndarray:
    """The elements of a buffer (bytes as uint8) that a desc addresses, as an array of its sizes."""
    dtype = np.dtype(DIRECTML_DTYPES[desc.dtype])
    return np.ndarray(desc.sizes, dtype, buffer, strides=tuple(step * dtype.itemsize for step in desc.steps))


def to_buffer(desc: TensorDesc, values: np.ndarray) -> bytes:
    """``values`` (of the desc's sizes) where the desc puts them in a buffer of its total bytes; zeros elsewhere."""
    buffer = np.zeros(desc.total_bytes, np.uint8)
    _view(desc, buffer)[...] = np.asarray(values).astype(DIRECTML_DTYPES[desc.dtype], copy=False).reshape(desc.sizes)
    return buffer.tobytes()


def from_buffer(desc: TensorDesc, data: bytes) -> np.ndarray:
    """The tensor a desc addresses in a buffer (a copy)."""
    return _view(desc, np.frombuffer(data, np.uint8)).copy()


@dataclass(frozen=True)
class Case:
    """One operator for DirectML: DML_OPERATOR_GATHER, GATHER_ELEMENTS, GATHER_ND, GATHER_ND1, SCATTER or SCATTER_ND
    with its attributes (``ATTRIBUTES``), its tensor descs (a scatter's ``updates`` too), the input buffers (each
    exactly its desc's total bytes) and the byte the output buffer is filled with before the dispatch.

    ``memory`` 0: each tensor in a buffer of its own, the output's read back. Else all tensors share one buffer of
    ``memory`` bytes, tensor k (input, indices, updates, output) at byte ``offsets[k]``; the buffer is filled, the
    inputs written at their offsets in that order, and the whole buffer read back."""

    operator: str
    attributes: dict[str, int]
    input: TensorDesc
    indices: TensorDesc
    output: TensorDesc
    input_bytes: bytes
    indices_bytes: bytes
    fill: int = 0xCD
    updates: TensorDesc | None = None
    updates_bytes: bytes = b""
    memory: int = 0
    offsets: tuple[int, ...] = ()

    @property
    def roles(self) -> tuple[str, ...]:
        """The tensors in the operator desc's order: input, indices, (updates,) output."""
        return ("input", "indices", "updates", "output") if self.updates is not None else ("input", "indices", "output")

    @property
    def descs(self) -> tuple[TensorDesc, ...]:
        """The tensor descs in the order of ``roles``."""
        return tuple(getattr(self, role) for role in self.roles)

    @property
    def inputs(self) -> tuple[bytes, ...]:
        """The input buffers in the order of ``roles`` (all but the output)."""
        return tuple(getattr(self, f"{role}_bytes") for role in self.roles[:-1])

    @property
    def read_back(self) -> int:
        """How many bytes come back: the output's total, or the shared memory."""
        return self.memory or self.output.total_bytes

    def __post_init__(self) -> None:
        if self.operator not in ATTRIBUTES:
            raise UserError(f"operator {self.operator!r}: expected one of {', '.join(ATTRIBUTES)}")
        if (self.updates is not None) != (self.operator in SCATTERS):
            raise UserError(f"{self.operator}: updates are given for a scatter, and only for a scatter")
        names = ATTRIBUTES[self.operator]
        if set(self.attributes) != set(names):
            raise UserError(f"{self.operator} takes the attributes {', '.join(names)}, not {sorted(self.attributes)}")
        for name, value in self.attributes.items():
            if not 0 <= value < 2**32:
                raise UserError(f"{name} = {value}: a UINT is 0 to {2**32 - 1}")
        for role, desc in zip(self.roles, self.descs, strict=True):
            if desc.dtype not in DIRECTML_DTYPES:
                raise UserError(f"{role}: data type {desc.dtype!r}: expected one of {', '.join(DIRECTML_DTYPES)}")
            if len(desc.sizes) > MAX_DIMENSIONS or (desc.strides is not None and len(desc.strides) != len(desc.sizes)):
                raise UserError(f"{role}: {len(desc.sizes)} sizes (at most {MAX_DIMENSIONS}) and as many strides")
        for role, data, desc in zip(self.roles, self.inputs, self.descs, strict=False):
            if len(data) != desc.total_bytes:
                raise UserError(f"{role}_bytes holds {len(data)} bytes; its desc's total is {desc.total_bytes}")
        if not 0 <= self.fill <= 255:
            raise UserError(f"fill = {self.fill}: a byte is 0 to 255")
        if self.memory and (
            len(self.offsets) != len(self.descs)
            or any(not 0 <= at <= self.memory - d.total_bytes for at, d in zip(self.offsets, self.descs, strict=False))
        ):
            raise UserError(f"offsets {self.offsets}: one per tensor, each tensor within the {self.memory} bytes")

    def text(self) -> str:
        """The case's desc.txt."""
        attributes = " ".join(f"{name} {self.attributes[name]}" for name in ATTRIBUTES[self.operator])
        tensors = "\n".join(desc.text() for desc in self.descs)
        memory = f"memory {self.memory} {' '.join(map(str, self.offsets))}\n" if self.memory else ""
        return f"operator {self.operator} {attributes}\n{tensors}\nfill {self.fill}\n{memory}"


@dataclass(frozen=True)
class DescOutcome:
    """What DirectML did with a case: ``refused``, the stage (create, compile, init, run) and HRESULT, as in
    ``"create 0x80070057"``; else ``output``, the output buffer read back whole."""

    refused: str | None
    output: bytes | None
