"""The built-in patch packs, shipped as ``lazypatch.registry``.

Each package directly in this folder is one pack, its one room, whose ``__init__.py``
begins with the pack's declarations (``PACK``, ``TAGS``, ``OPT_IN``, ``TARGETS``,
``REQUIRES``: docs/writing_packs.md). A pack is written
against lazypatch's public API only (exactly what a third-party pack would use):
importing it *declares* patches and imports none of their targets, so that
activation stays cheap. Heavy code (torch kernels, wrappers) lives in submodules
that a patch imports when its target is imported. ``shared/`` holds the kernels
and helpers two packs use: importing it registers no patch.
"""

import os

#: The folder of the code two packs share (kernels, helpers): not a pack.
SHARED = "shared"

#: Packs whose every patch is off by default: exactly the packs that declare
#: ``OPT_IN = True`` (tests/packs/test_pack_contract.py checks that the two agree and
#: says what to write). Listed here so that activation opens no pack to learn it: it only
#: declares them (``lazypatch.declare_opt_in_pack``), and one is imported, its patches
#: registered, when LAZYPATCH_ENABLE, ``lazypatch.enable()`` or ``lazypatch list`` names
#: it. Their dozens of registrations would otherwise cost every process about 3M
#: instructions each (benchmarks/COSTS.md) for patches that almost never run.
OPT_IN = ("cuda_extensions", "device", "export", "npu_stand_in")


def pack_names() -> "list":
    """The built-in packs, in a stable order: the packages in this folder but ``shared``.
    Every entry without a dot is a package (the contract test checks it): no file is
    looked at, on the path of every activation."""
    return sorted(entry for entry in os.listdir(os.path.dirname(__file__))
                  if "." not in entry and not entry.startswith("_") and entry != SHARED)


def declare_opt_in_settings() -> None:
    """Declare the settings of the opt-in packs, in every process (idempotent).

    An opt-in pack is not imported at activation unless the configuration names it,
    and importing any module inside it would import the whole pack; its variables are
    declared here instead, so that ``lazypatch run --help`` lists them and a set
    ``LAZYPATCH_DEVICE`` is not reported as unknown. (A function here, not a module of
    its own: one module fewer to find and load on every activation.)
    """
    import lazypatch
    lazypatch.declare_variable(
        "LAZYPATCH_DEVICE",
        "device pack: target device type for CUDA code (npu, cpu, or another torch device "
        "type); default: the NPU when torch_npu sees one, else the CPU")
    lazypatch.declare_variable(
        "LAZYPATCH_CUDA_AVAILABLE",
        "device pack: 1 makes torch.cuda.is_available() return True, and Tensor.is_cuda for "
        "tensors on the device CUDA work goes to (default: honest)")
    lazypatch.declare_variable(
        "LAZYPATCH_CUDA_AVAILABLE_EXCLUDE",
        "device pack: comma-separated modules (and their submodules) that still get the "
        "honest torch.cuda.is_available() and Tensor.is_cuda when LAZYPATCH_CUDA_AVAILABLE=1")
    lazypatch.declare_variable(
        "LAZYPATCH_ALLOW_INTERNAL_FORMAT",
        "device pack: 1 keeps torch_npu's private (internal) tensor formats allowed")


def load_packs() -> None:
    """Import every built-in pack, registering its patches; a broken pack warns, and
    the other packs still load whatever the warnings filters say."""
    import sys
    from _warnings import warn

    import lazypatch

    declare_opt_in_settings()
    for name in pack_names():
        try:
            if name in OPT_IN:
                # Its patches are registered when a selector names the pack; its
                # settings are declared by declare_opt_in_settings, above.
                lazypatch.declare_opt_in_pack(name, f"{__name__}.{name}")
                continue
            __import__(f"{__name__}.{name}")
        except Exception as error:
            message = (f"lazypatch: built-in pack {name!r} failed to load: "
                       f"{type(error).__name__}: {error}")
            try:
                warn(message, lazypatch.ConfigurationWarning, stacklevel=2)
            except Exception:   # -W error made the warning an exception: say it, go on
                sys.stderr.write(f"ConfigurationWarning: {message}\n")
