"""The settings of the opt-in packs, declared in every process.

An opt-in pack (``OPT_IN`` in this folder's ``__init__``) is not imported at
activation unless the configuration names it, and importing any module inside
it would import the whole pack; its variables live here instead, so that
``lazypatch run --help`` lists them and a set ``LAZYPATCH_DEVICE`` is not
reported as unknown.
"""

import lazypatch

lazypatch.declare_variable(
    "LAZYPATCH_DEVICE",
    "device pack: target device type for CUDA code (npu, cpu, or another torch device "
    "type); default: the NPU when torch_npu sees one, else the CPU")
lazypatch.declare_variable(
    "LAZYPATCH_CUDA_AVAILABLE",
    "device pack: 1 makes torch.cuda.is_available() return True (default: honest)")
lazypatch.declare_variable(
    "LAZYPATCH_CUDA_AVAILABLE_EXCLUDE",
    "device pack: comma-separated modules (and their submodules) that still get the "
    "honest torch.cuda.is_available() when LAZYPATCH_CUDA_AVAILABLE=1")
lazypatch.declare_variable(
    "LAZYPATCH_ALLOW_INTERNAL_FORMAT",
    "device pack: 1 keeps torch_npu's private (internal) tensor formats allowed")
