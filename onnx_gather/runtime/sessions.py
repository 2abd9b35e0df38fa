"""The options of every ONNX Runtime session onnx-gather creates to run a model."""

from __future__ import annotations

from pathlib import Path

import onnxruntime


def quiet_options(folder: Path | None = None) -> onnxruntime.SessionOptions:
    """Session options that log nothing (a failed run is reported with its message); with ``folder``, a model handed
    over as bytes finds its external data there."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return options
