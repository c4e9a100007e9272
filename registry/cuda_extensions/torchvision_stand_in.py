"""torchvision's compiled operators, provided in pure PyTorch when its ``_C`` cannot load.

torchvision's ``extension.py`` loads ``_C`` (which defines the ``torchvision::*``
operators) and records the outcome in ``_has_ops()``. When the library does not load
beside the installed torch (a CUDA build beside a CPU torch: ``libc10_cuda.so``
missing; a build for another torch), ``import torchvision`` then fails in
``_meta_registrations.py`` ("operator torchvision::nms does not exist"), and every
``torchvision.ops`` function would raise "Couldn't load custom C++ ops".

:func:`provide` runs right after ``torchvision.extension``'s body, before the rest of
torchvision: it defines the same operator schemas in the ``torchvision`` namespace with
the kernels of :mod:`.torchvision_ops` (one ``CompositeExplicitAutograd`` kernel per
operator, so they run on whatever device the tensors are on) and makes ``_has_ops()``
true. torchvision's own Python then runs unchanged on top: its fake (meta) kernels,
its autograd registrations (which call the ``_*_backward`` operators defined here),
its autocast wrappers and its argument checks.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

PACK = "cuda_extensions"
MARKER = "__lazypatch_pure_pytorch__"

#: Operator -> schema, as torchvision's C++ defines them (``torchvision/csrc/ops/*.cpp``).
SCHEMAS: Dict[str, str] = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "box_iou_rotated": "box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor",
    "roi_align": "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                 "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward": "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, "
                           "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
                           "SymInt channels, SymInt height, SymInt width, int sampling_ratio, "
                           "bool aligned) -> Tensor",
    "qroi_align": "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, "
                  "float rois_scale, int rois_zero_point, float spatial_scale, "
                  "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
                  "bool aligned) -> Tensor",
    "roi_pool": "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                "SymInt pooled_width) -> (Tensor, Tensor)",
    "_roi_pool_backward": "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, "
                          "float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
                          "SymInt batch_size, SymInt channels, SymInt height, SymInt width) "
                          "-> Tensor",
    "ps_roi_align": "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, "
                    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio) "
                    "-> (Tensor, Tensor)",
    "_ps_roi_align_backward": "_ps_roi_align_backward(Tensor grad, Tensor rois, "
                              "Tensor channel_mapping, float spatial_scale, "
                              "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
                              "SymInt batch_size, SymInt channels, SymInt height, "
                              "SymInt width) -> Tensor",
    "ps_roi_pool": "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, "
                   "SymInt pooled_height, SymInt pooled_width) -> (Tensor, Tensor)",
    "_ps_roi_pool_backward": "_ps_roi_pool_backward(Tensor grad, Tensor rois, "
                             "Tensor channel_mapping, float spatial_scale, "
                             "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
                             "SymInt channels, SymInt height, SymInt width) -> Tensor",
    "deform_conv2d": "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, "
                     "Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, "
                     "SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
                     "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward": "_deform_conv2d_backward(Tensor grad, Tensor input, "
                               "Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
                               "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
                               "SymInt dilation_h, SymInt dilation_w, SymInt groups, "
                               "SymInt offset_groups, bool use_mask) "
                               "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "_cuda_version": "_cuda_version() -> int",
}

#: Operators whose stand-in raises NotImplementedError naming them when called.
NOT_IMPLEMENTED = ("box_iou_rotated",)


def provide(extension: Any, patch: Any) -> None:
    """Define torchvision's operators with pure-PyTorch kernels when its compiled
    library did not load; leave a torchvision whose library loads untouched."""
    has_ops = getattr(extension, "_has_ops", None)
    if not callable(has_ops):
        patch.skip("this torchvision has no extension._has_ops(): not a layout the stand-in "
                   "knows (torchvision 0.17 or later)")
    if has_ops():
        patch.skip("torchvision's compiled operators load beside this torch: they are used, "
                   "untouched")
    import torch
    defined = [name for name in SCHEMAS if _is_defined(torch, name)]
    if defined:
        patch.skip(f"torchvision::{defined[0]} is defined already (by another library): "
                   f"left as it is")
    reason = _load_error(extension)
    kernels = _kernels()
    library = torch.library.Library("torchvision", "DEF")
    for name, schema in SCHEMAS.items():
        library.define(schema)
        library.impl(name, kernels[name], "CompositeExplicitAutograd")
    # Undo removes the definitions again (torchvision's own registrations made on top
    # of them in the meantime go with them).
    patch.on_undo(library._destroy)
    patch.setattr(extension, "_has_ops", _stand_in_has_ops)
    patch.setattr(extension, MARKER, PACK, new=True)
    names = [name for name in SCHEMAS if not name.startswith("_")]
    patch.note(f"pure-PyTorch stand-ins for torchvision's compiled operators "
               f"({', '.join(name for name in names if name not in NOT_IMPLEMENTED)}; "
               f"{', '.join(NOT_IMPLEMENTED)} raises NotImplementedError): {reason}")
    if not ships_autograd_formulas(extension):
        # Before 0.28 torchvision registered its autograd formulas from _C itself: without
        # them its operators would silently return outputs that take no gradient.
        from .torchvision_autograd import register_autograd
        register_autograd(library)
        patch.note("autograd formulas registered by the stand-in (this torchvision "
                   "registers its own from its compiled library)")


def ships_autograd_formulas(extension: Any) -> bool:
    """Whether torchvision registers its operators' autograd formulas in Python
    (``torchvision/_autograd_registrations.py``, 0.28 and later)."""
    folder = os.path.dirname(getattr(extension, "__file__", "") or "")
    return os.path.exists(os.path.join(folder, "_autograd_registrations.py"))


def _stand_in_has_ops() -> bool:
    """True: torchvision's operators are defined (by lazypatch's pure-PyTorch stand-in)."""
    return True


def _is_defined(torch: Any, name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _load_error(extension: Any) -> str:
    """Why torchvision's ``_C`` did not load: the error of loading it once more."""
    import torch
    try:
        from torchvision._internally_replaced_utils import _get_extension_path
        path = _get_extension_path("_C")
    except ImportError as error:
        return f"torchvision has no compiled library ({error})"
    try:
        torch.ops.load_library(path)
    except (ImportError, OSError) as error:
        # torch wraps the loader's own message ("libc10_cuda.so: cannot open shared
        # object file") in a generic one: the cause is what says why.
        cause = error.__cause__ or error
        return f"{os.path.basename(path)} cannot load: {type(cause).__name__}: {cause}"
    return f"{os.path.basename(path)} loaded on a second try but defined no operator"


def _kernels() -> Dict[str, Callable[..., Any]]:
    from . import torchvision_ops as ops
    kernels: Dict[str, Callable[..., Any]] = {
        name: getattr(ops, name) for name in SCHEMAS if name != "_cuda_version"}
    kernels["_cuda_version"] = ops.cuda_version
    return kernels

