"""Tensors between Python and runner.exe, one file each, of every element type ONNX Runtime 1.24.4 takes as an input
or an output: nothing is pickled.

A tensor file: the magic ``OGTENSOR``, the ONNX element type (int32), the dimension count (int32), the dims (int64
each), then the elements. STRING: each element's length in bytes (uint64 each), then the elements' bytes one after
the other (``str`` elements as UTF-8, ``bytes`` elements as they are; NUL is a byte like any other). Every other type:
the elements in C order as ONNX Runtime holds them in memory, which is ONNX's ``raw_data`` layout (INT4, UINT4 and
FLOAT4E2M1 two to a byte, INT2 and UINT2 four, from the low bits). All little-endian. runner.c reads and writes the
same files.

Types numpy lacks are ml_dtypes' (BFLOAT16, the FLOAT8s, INT4, ...), as onnx's ``helper.tensor_dtype_to_np_dtype``
maps them. STRING outputs come back as an object array of ``str``, as ONNX Runtime's Python binding returns them.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_gather.core.errors import UserError
from onnx_gather.directml.layout import ORT_DIRECTML_VERSION

MAGIC = b"OGTENSOR"
# What runner.c's table carries: every element type of ONNX but COMPLEX64, COMPLEX128 and FLOAT8E8M0 (ONNX Runtime
# 1.24.4 takes none of them: it refuses a model with such an input or output) and the FLOAT6s (ONNX 1.20's, which no
# ONNX Runtime takes yet).
CARRIED = frozenset(
    getattr(TensorProto, name)
    for name in (
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "STRING",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "BFLOAT16",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "UINT4",
        "INT4",
        "FLOAT4E2M1",
        "UINT2",
        "INT2",
    )
)
PACKED = frozenset({TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1, TensorProto.INT2, TensorProto.UINT2})
MAX_DIMS = 16  # runner.c's


class CarryError(UserError):
    """A value the DirectML runner cannot carry; the message names the input and why."""


def element_type(name: str, array: np.ndarray) -> int:
    """The ONNX element type ``array`` travels as (numpy ``str``, ``bytes`` and object arrays: STRING)."""
    if array.dtype.kind in "OUS":
        return TensorProto.STRING
    try:
        element = helper.np_dtype_to_tensor_dtype(array.dtype.newbyteorder("="))
    except (KeyError, TypeError, ValueError):
        raise CarryError(f"input {name!r} is a numpy {array.dtype} array, which is no ONNX tensor type") from None
    if element not in CARRIED:
        raise CarryError(
            f"input {name!r} is {TensorProto.DataType.Name(element)}, which ONNX Runtime "
            f"{ORT_DIRECTML_VERSION} does not take: the DirectML runner cannot carry it"
        )
    return element


def _utf8(name: str, position: tuple[int, ...], item: object) -> bytes:
    if isinstance(item, bytes):
        return item
    if not isinstance(item, str):
        raise CarryError(
            f"input {name!r} holds a {type(item).__name__} at {list(position)}, where a STRING "
            "tensor holds str or bytes"
        )
    try:
        return item.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CarryError(f"input {name!r}: the string at {list(position)} cannot be UTF-8 ({error.reason})") from None


def write(path: Path, name: str, value: object) -> None:
    """Write the value fed to input ``name`` as a tensor file."""
    array = np.asarray(value)
    element = element_type(name, array)
    if array.ndim > MAX_DIMS:
        raise CarryError(f"input {name!r} has {array.ndim} dimensions; the DirectML runner carries at most {MAX_DIMS}")
    with open(path, "wb") as file:
        file.write(MAGIC + struct.pack(f"<ii{array.ndim}q", element, array.ndim, *array.shape))
        if element == TensorProto.STRING:
            items = [_utf8(name, position, item) for position, item in np.ndenumerate(array)]
            file.write(np.array([len(item) for item in items], "<u8").tobytes())
            file.write(b"".join(items))
        elif element in PACKED:
            file.write(numpy_helper.from_array(array).raw_data)
        else:
            np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tofile(file)


def read(path: Path, name: str) -> np.ndarray:
    """Read the tensor file of output ``name``."""
    with open(path, "rb") as file:
        magic, element, dims = struct.unpack("<8sii", file.read(16))
        if magic != MAGIC or element not in CARRIED or dims < 0:
            raise ValueError(f"output {name!r}: {path.name} is not a tensor file of a carried type")
        shape = struct.unpack(f"<{dims}q", file.read(8 * dims))
        if element == TensorProto.STRING:
            lengths = np.frombuffer(file.read(8 * math.prod(shape)), "<u8")
            data, items, start = file.read(), [], 0
            for length in lengths.tolist():
                items.append(_text(name, data[start : start + length], len(items), shape))
                start += length
            array = np.empty(len(items), dtype=object)
            array[:] = items
            return array.reshape(shape)
        if element in PACKED:
            return numpy_helper.to_array(TensorProto(data_type=element, dims=shape, raw_data=file.read()))
        array = np.empty(shape, helper.tensor_dtype_to_np_dtype(element))
        if file.readinto(memoryview(array.reshape(-1).view(np.uint8))) != array.nbytes:
            raise ValueError(f"output {name!r}: {path.name} is shorter than its header says")
        return array


def _text(name: str, data: bytes, index: int, shape: tuple[int, ...]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        position = [int(i) for i in np.unravel_index(index, shape)] if shape else []
        raise ValueError(f"output {name!r}: the string at {position} is not UTF-8") from None
