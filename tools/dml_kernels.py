"""Write onnx_gather/graphs/placement/dml_kernels.json: the kernels ONNX Runtime's DirectML provider registers,
read from its source.

    python tools/dml_kernels.py OperatorRegistration.cpp OperatorVersions.h SOURCE-NAME

The two files are onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/OperatorRegistration.cpp and
onnxruntime/core/providers/dml/OperatorAuthorHelper/OperatorVersions.h of one ONNX Runtime commit (SOURCE-NAME says
which; it is recorded in the table).
``onnx_gather.graphs.placement.nodes`` reads the table to place nodes as the provider does.

Per registration: the domain, the operator, the ONNX since-version it starts at (the provider registers each without
an end version), its type constraints (ONNX element type names per constraint name) and the inputs it takes in CPU
memory (``requiredConstantCpuInputs``). The kernels the provider registers besides the table, with the memory they
take (AbiCustomRegistry.cpp: Shape's and Size's outputs are in CPU memory; OperatorRegistration.cpp's
RegisterCpuOperatorsAsDml: If takes its condition in CPU memory; sequence and optional operators; and the DFT, STFT
and GridSample kernels RegisterDmlOperators registers after the table), are stated below. ONNX Runtime takes a kernel
registered without an end version for a node of exactly its since-version (KernelRegistry::VerifyKernelDef).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "onnx_gather" / "graphs" / "placement" / "dml_kernels.json"
# DirectML's flag names -> ONNX element type names.
TYPE_NAMES = {
    "Float32": "float",
    "UInt4": "uint4",
    "Int4": "int4",
    "UInt8": "uint8",
    "Int8": "int8",
    "UInt16": "uint16",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "String": "string",
    "Bool": "bool",
    "Float16": "float16",
    "Float64": "double",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Complex64": "complex64",
    "Complex128": "complex128",
}
DOMAINS = {
    "REG_INFO": "",
    "REG_INFO_VER": "",
    "REG_INFO_COPY": "",
    "REG_INFO_DYNAMIC_OUTPUTS": "",
    "REG_INFO_MS": "com.microsoft",
    "REG_INFO_MS_ALIAS": "com.microsoft",
    "REG_INFO_MSDML": "com.microsoft.dml",
}
# Registered outside the table, with the memory they use (see the module docstring).
EXTRA = {
    "cpu_outputs": {"Shape": [0], "Size": [0], "SequenceLength": [0]},
    "cpu_registered": [
        ["", "SequenceAt", 11, [1]],
        ["", "SequenceConstruct", 11, []],
        ["", "SequenceEmpty", 11, []],
        ["", "SequenceLength", 11, []],
        ["", "SequenceErase", 11, [1]],
        ["", "SequenceInsert", 11, [2]],
        ["", "OptionalHasElement", 15, []],
        ["", "OptionalGetElement", 15, []],
        ["", "OptionalHasElement", 18, []],
        ["", "OptionalGetElement", 18, []],
        *(["", "If", since, [0]] for since in (7, 11, 13, 16, 19)),
        # RegisterDmlOperators' own three, registered after the table (their CPU inputs not read)
        ["", "DFT", 17, []],
        ["", "DFT", 20, []],  # measured: ONNX's DFT-20 cases run on DirectML (the source read registers DFT-17 only)
        ["", "STFT", 17, []],
        ["", "GridSample", 16, []],
    ],
}


def _flags(source: str) -> dict[str, int]:
    body = re.search(r"enum class SupportedTensorDataTypes : uint\d+_t\s*\{(.*?)\};", source, re.S)[1]
    body = re.sub(r"//[^\n]*", "", body)
    flags: dict[str, int] = {}
    for name, expression in re.findall(r"(\w+)\s*=\s*([^,]+),", body):
        expression = " ".join(expression.split())
        if "<<" in expression:
            flags[name] = 1 << int(expression.split("<<")[1])
        elif "-1" in expression:
            flags[name] = -1
        else:
            flags[name] = 0
            for part in expression.split("|"):
                flags[name] |= flags[part.strip()]
    return flags


def _types(mask: int, flags: dict[str, int]) -> list[str]:
    return [onnx_name for name, onnx_name in TYPE_NAMES.items() if mask == -1 or mask & flags[name]]


def main(registration: str, versions: str, source_name: str) -> None:
    source = re.sub(r"/\*.*?\*/", "", Path(registration).read_text(), flags=re.S)
    flags = _flags(source)
    names = {
        m[1]: re.findall(r'"(\w+)"', m[2])
        for m in re.finditer(r"std::array<const char\*, \d+> (\w+)\s*=\s*\{([^}]*)\}", source)
    }
    supported: dict[str, list[int]] = {}
    for m in re.finditer(r"std::array<SupportedTensorDataTypes, \d+> (\w+)\s*=\s*(\{[^;]*\}|\w+);", source):
        if m[2].startswith("{"):
            parts = [p for p in m[2].strip("{} ").split(",") if p.strip()]
            supported[m[1]] = [_combined(p, flags) for p in parts]
        else:
            supported[m[1]] = supported[m[2]]
    since = {
        (ns[1], op): int(v)
        for ns in re.finditer(r"namespace (\w+)\s*\{([^{}]*)\}", Path(versions).read_text())
        for op, v in re.findall(r"sc_sinceVer_(\w+) = (\d+);", ns[2])
    }
    table = source[source.index("operatorRegistrationInformationTable[] =") :]
    table = table[: table.index("\n};")]
    kernels = []
    for m in re.finditer(r"\{(REG_INFO\w*)\(\s*(\d+),\s*(\w+),\s*(.*?)\)\},", re.sub(r"//[^\n]*", "", table)):
        macro, version, op, rest = m[1], m[2], m[3], _arguments(m[4])
        if macro == "REG_INFO_MS_ALIAS":
            rest = rest[1:]  # the aliases
        prefix = "MsftOperatorSet" if DOMAINS[macro] else "OnnxOperatorSet"
        masks = zip(names[rest[0]], supported[rest[1]], strict=False)
        constraints = {name: _types(mask, flags) for name, mask in masks}
        cpu_inputs = re.search(r"requiredConstantCpuInputs\(([\d, ]*)\)", m[4])
        cpu = [int(i) for i in cpu_inputs[1].split(",") if i.strip()] if cpu_inputs else []
        kernels.append([DOMAINS[macro], op, since[(prefix + version, op)], constraints, cpu])
    table_json = {"source": source_name, "kernels": kernels, **EXTRA}
    OUT.write_text(json.dumps(table_json, separators=(",", ":")) + "\n")
    print(f"wrote {OUT}: {len(kernels)} registrations from {source_name}")


def _arguments(text: str) -> list[str]:
    """Comma-separated arguments, commas inside parentheses kept."""
    arguments, depth, current = [], 0, ""
    for character in text:
        depth += {"(": 1, ")": -1}.get(character, 0)
        if character == "," and depth == 0:
            arguments.append(current.strip())
            current = ""
        else:
            current += character
    return [*arguments, current.strip()]


def _combined(expression: str, flags: dict[str, int]) -> int:
    value = 0
    for part in expression.split("|"):
        value |= flags[part.strip().removeprefix("SupportedTensorDataTypes::")]
    return value


if __name__ == "__main__":
    main(*sys.argv[1:4])
