"""The NPU stand-in: code written for an Ascend NPU imports and runs on a machine without one.

Off by default (tag ``npu_stand_in``); turn it on with ``--enable npu_stand_in`` or
``LAZYPATCH_ENABLE=npu_stand_in``. Where ``torch_npu`` is NOT installed, importing it
then gives a module that sends NPU work to the device this machine has (CUDA where torch
sees a GPU, else the CPU):

====================================  =========================================================
module                                what the stand-in carries
====================================  =========================================================
``torch_npu``                         ``npu_fusion_attention``, ``npu_rms_norm``,
                                      ``npu_rotary_mul`` in plain PyTorch; any other ``npu_*``
                                      operator importable, raising when called (naming it);
                                      sets ``torch.npu`` and ``Tensor.npu``/``Module.npu``
``torch_npu.npu`` (``torch.npu``)     device functions (``set_device``, ``synchronize``,
                                      ``manual_seed``, ``default_generators``, memory,
                                      streams, ``config``, ``set_compile_mode``) on the
                                      available device; ``is_available()`` is False
``torch_npu.npu.amp``                 ``autocast``, ``GradScaler`` of the available device
``torch_npu.contrib.transfer_to_npu`` importing it turns on the ``device`` pack (CUDA calls
                                      go to the available device), as torch_npu's sends them
                                      to the NPU
``torch_npu.profiler``                ``profile`` (NPU activities mapped), ``schedule``,
                                      ``ProfilerActivity``, ``ProfilerLevel``, ...
``torch_npu.optim``                   ``NpuFusedSGD``/``Adam``/``AdamW`` as torch's optimizers
``mx_driving`` (lazypatch's own,      DrivingSDK's operators where lazypatch has the kernel
where DrivingSDK is not installed)    (multi-scale deformable attention, Sparse4D's
                                      deformable aggregation, ``scatter_max``/
                                      ``mean``/``add``, ``npu_add_relu``, ``npu_max_pool2d``,
                                      ``npu_batch_matmul``); every other DrivingSDK
                                      operator importable, raising when called
====================================  =========================================================

Each module is two patches, as in the ``cuda_extensions`` pack: ``npu_stand_in.<module>``
(an import boundary, ``lazypatch.stand_in``) provides the empty module only when nothing
installed provides it, and ``npu_stand_in.<module>.pytorch`` fills it; a real
``torch_npu`` is imported and left alone (both report ``skipped``).
``npu_stand_in.mx_driving_operators`` adds the operators to lazypatch's ``mx_driving``
(never to an installed DrivingSDK). The report lists the operators provided and each
operator a program called that the stand-in has no kernel for.

Nothing here is a fake NPU: no NPU device is claimed. This file only declares
(standard library and lazypatch); torch is imported when ``torch_npu`` is.
"""

from __future__ import annotations

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "npu_stand_in"
TAGS = (PACK,)
OPT_IN = True
TARGETS = ("torch_npu", "mx_driving")
REQUIRES = ()

import lazypatch

from . import ledger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple

#: The driving_sdk_api pack's patch that provides lazypatch's mx_driving: a patch name is
#: public, so this pack names it without importing that pack.
DRIVING_SDK_STAND_IN = "driving_sdk_api.mx_driving_patcher"
#: Set on every stand-in this pack provides: the fill patches act on those only.
MARKER = "__lazypatch_npu_stand_in__"
#: The report notes of the operators that raised are attached to the first fill applied.
_NOTES_ATTACHED: "list" = []


def _import_child(module: "Any", child: str) -> None:
    """Import submodule ``child`` of a stand-in, as the real package's ``__init__`` does
    (the child's own stand-in patch records its binding on the parent)."""
    from importlib import import_module
    import_module(f"{module.__name__}.{child}")


def _fill_torch_npu(module: "Any", patch: "Any") -> None:
    """torch_npu's fused operators, the lookup of the others, torch.npu, Tensor/Module.npu."""
    import torch

    from . import device, fused, unavailable
    for child in ("npu", "profiler", "optim"):
        _import_child(module, child)
    for name in fused.OPERATORS:
        patch.setattr(module, name, getattr(fused, name))
    unavailable_operators: "Dict[str, Any]" = {}

    def operator_lookup(name: str) -> "Any":
        # Any other npu_* operator: importable, raising when called (torch_npu has hundreds).
        if not name.startswith("npu_"):
            raise AttributeError(f"module 'torch_npu' (lazypatch's NPU stand-in) has no "
                                 f"attribute {name!r}")
        if name not in unavailable_operators:
            unavailable_operators[name] = unavailable.UnavailableOperator(f"torch_npu.{name}")
        return unavailable_operators[name]
    patch.setattr(module, "__getattr__", operator_lookup)
    patch.setattr(torch, "npu", module.npu)
    patch.setattr(torch.Tensor, "npu", device.tensor_npu)
    patch.setattr(torch.nn.Module, "npu", device.module_npu)
    target = device.available_device()
    provided = [f"torch_npu.{name}" for name in fused.OPERATORS]
    ledger.provided(provided)
    patch.note(f"NPU calls go to {target.type!r} (no NPU here); torch.npu, Tensor.npu and "
               f"Module.npu set; pure-PyTorch {', '.join(provided)}")


def _fill_from(source: str, names_attribute: str) -> "Callable[[Any, Any], None]":
    def fill(module: "Any", patch: "Any") -> None:
        from importlib import import_module
        implementation = import_module(f"{__name__}.{source}")
        names = getattr(implementation, names_attribute)
        for name in names:
            patch.setattr(module, name, getattr(implementation, name))
        patch.note(f"{', '.join(names)} on the available device")
    return fill


def _fill_npu_namespace(module: "Any", patch: "Any") -> None:
    """torch.npu's device functions, and its amp submodule."""
    _fill_from("device", "NAMESPACE")(module, patch)
    _import_child(module, "amp")


def _fill_contrib(module: "Any", patch: "Any") -> None:
    """Nothing until ``transfer_to_npu`` is imported (its import is what turns it on)."""
    patch.note("empty until torch_npu.contrib.transfer_to_npu is imported")


def _fill_transfer_to_npu(module: "Any", patch: "Any") -> None:
    """Turn on the device pack, as torch_npu's transfer_to_npu sends CUDA calls to the NPU;
    undoing this patch turns off what it turned on (not what was on before)."""
    # enable() loads the opt-in device pack when it is not loaded yet (public API: no
    # import of another pack's modules).
    already = {record.name for record in lazypatch.report()
               if "device" in record.tags and record.status != "disabled"}
    enabled = [name for name in lazypatch.enable("device") if name not in already]

    def turn_off() -> None:
        for name in enabled:
            lazypatch.unpatch(name)
    patch.on_undo(turn_off)
    patch.note(f"CUDA calls go to the available device: the device pack is on "
               f"({len(enabled)} of its patches enabled here)")


#: module -> fill function. Parents come before their children.
STAND_INS: "Dict[str, Callable[[Any, Any], None]]" = {
    "torch_npu": _fill_torch_npu,
    "torch_npu.npu": _fill_npu_namespace,
    "torch_npu.npu.amp": _fill_from("device", "AMP"),
    "torch_npu.profiler": _fill_from("profiler", "NAMES"),
    "torch_npu.optim": _fill_from("optim", "NAMES"),
    "torch_npu.contrib": _fill_contrib,
    "torch_npu.contrib.transfer_to_npu": _fill_transfer_to_npu,
}


def fill_patch_name(module_name: str) -> str:
    """``npu_stand_in.<module>.pytorch``: the patch that fills a stand-in."""
    return f"{PACK}.{module_name}.pytorch"


def _declare(module_name: str, fill: "Callable[[Any, Any], None]") -> None:
    """The boundary (an empty, marked module when nothing installed provides it) and the
    patch that fills it; both off by default."""
    lazypatch.stand_in(module_name, attributes={MARKER: PACK}, name=f"{PACK}.{module_name}",
                       tags=TAGS, enabled=False)

    def fill_stand_in(module: "Any", patch: "Any") -> None:
        if MARKER not in vars(module):
            patch.skip(f"{module_name!r} is installed: the real one is used, untouched")
        if not _NOTES_ATTACHED:
            _NOTES_ATTACHED.append(patch.name)
            patch.note_provider(ledger.lines)
        fill(module, patch)
    fill_stand_in.__doc__ = f"Fill the NPU stand-in of {module_name}: {fill.__doc__ or ''}"
    fill_stand_in.__qualname__ = f"fill_{module_name.replace('.', '_')}"
    lazypatch.when_imported(module_name, name=fill_patch_name(module_name), tags=TAGS,
                            enabled=False)(fill_stand_in)


for _module_name, _fill in STAND_INS.items():
    _declare(_module_name, _fill)


@lazypatch.when_imported("mx_driving", name=f"{PACK}.mx_driving_operators", tags=TAGS,
                         enabled=False)
def mx_driving_operators(mx_driving: "Any", patch: "Any") -> None:
    """DrivingSDK's operators in lazypatch's mx_driving: kernels where lazypatch has them,
    the other names raising when called."""
    if vars(mx_driving).get("__lazypatch_stand_in__") != DRIVING_SDK_STAND_IN:
        patch.skip("mx_driving is DrivingSDK's own: its operators are used, untouched")
    from . import driving_sdk_operators as operators
    from .unavailable import UnavailableOperator
    for name in operators.DRIVING_SDK_NAMES:
        if name in operators.PROVIDED:
            value = getattr(operators, name)
        else:
            value = UnavailableOperator(f"mx_driving.{name}")
        patch.setattr(mx_driving, name, value)
    # DrivingSDK's compiled module, which its Python operators (and some model files'
    # patches) import: every kernel importable, raising when called.
    patch.provide_module("mx_driving._C", operators.compiled_module(UnavailableOperator))
    if not _NOTES_ATTACHED:
        _NOTES_ATTACHED.append(patch.name)
        patch.note_provider(ledger.lines)
    ledger.provided([f"mx_driving.{name}" for name in operators.PROVIDED])
    raising = len(set(operators.DRIVING_SDK_NAMES) - set(operators.PROVIDED))
    patch.note(f"pure-PyTorch mx_driving.{', '.join(operators.PROVIDED)}; {raising} other "
               f"DrivingSDK operators and mx_driving._C's kernels importable, raising when "
               f"called")


__all__: "Tuple[str, ...]" = ("STAND_INS", "fill_patch_name", "PACK", "MARKER")
