"""Real DirectML on Linux: ONNX Runtime's DirectML execution provider from the Windows wheel, under Wine, whose
Direct3D 12 (vkd3d) runs over Mesa's lavapipe, Vulkan on the CPU.

* ``install``: ``onnx-gather setup-directml``, which puts every part in a cache folder, and ``--check``;
* ``runner.c``: the small Windows program that drives ONNX Runtime's C API (built at set-up);
* ``worker``: the Python side that starts Xvfb and the runner under Wine, talks to it, and ends them;
* ``direct.c`` and ``direct``: a second program calling DirectML.dll directly, and its runner;
* ``protocol.h``: what both programs share: the request loop, the replies and the failure buffer.

Imports ``core`` and ``graphs`` only.
"""
