"""torch-level Ascend rewrites: boolean-mask indexing and batched matmul.

Both are wrappers (``patch.wrap``) around the original callables. A call is
rewritten only when its arguments are exactly of the form the NPU path
handles; any other call (other index types, ``out=``, keyword arguments,
other shapes or dtypes) goes to the original unchanged, so its results and
its error messages are upstream's.

DrivingSDK's ``index`` patch overrides ``Tensor.__torch_function__``, which
PyTorch never consults for plain tensors (only for subclasses such as
``nn.Parameter``); wrapping ``Tensor.__getitem__`` reaches every tensor.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Dict, Optional, Tuple

import torch

import lazypatch

from .kernels import kernel

MATMUL_PATCH = "ascend.batch_matmul"

Tensor = torch.Tensor


def masked_select_index(tensor: Any, index: Any) -> Optional[torch.Tensor]:
    """``tensor[index]`` by ``torch.masked_select`` when ``index`` is a boolean mask
    of a 1-D/2-D tensor (whole tensor, or rows of a 2-D one); None otherwise."""
    if not isinstance(index, Tensor) or index.dtype is not torch.bool \
            or not isinstance(tensor, Tensor) or index.device != tensor.device:
        return None
    dims, mask_dims = tensor.dim(), index.dim()
    if dims not in (1, 2) or mask_dims not in (1, 2):
        return None
    if mask_dims == dims and index.shape == tensor.shape:
        return torch.masked_select(tensor, index)
    if dims == 2 and mask_dims == 1 and index.shape[0] == tensor.shape[0]:
        rows = index.unsqueeze(1).expand_as(tensor)
        return torch.masked_select(tensor, rows).view(-1, tensor.shape[1])
    return None


def bool_index_wrapper(wrapped: Any, instance: Any, args: Tuple[Any, ...],
                       kwargs: Dict[str, Any]) -> Any:
    """``Tensor.__getitem__`` wrapper: masks via masked_select, the rest unchanged."""
    if instance is not None and len(args) == 1 and not kwargs:
        selected = masked_select_index(instance, args[0])
        if selected is not None:
            return selected
    return wrapped(*args, **kwargs)


def batch_matmul_shapes(a: Any, b: Any) -> bool:
    """Whether npu_batch_matmul computes ``a @ b``: same dtype and device, 4 to 7
    dims each, broadcastable batch dims, square ``a`` matrices times column
    vectors (the kernel's supported case, as DrivingSDK checks it)."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        return False   # e.g. ``tensor @ ndarray``
    if a.dtype != b.dtype or a.device != b.device or a.dim() != b.dim() or not 4 <= a.dim() <= 7:
        return False
    if not all(x == y or x == 1 or y == 1 for x, y in zip(a.shape[:-2], b.shape[:-2])):
        return False
    return a.shape[-2] == a.shape[-1] == b.shape[-2] and b.shape[-1] == 1


def _npu_matmul(a: Any, b: Any) -> Optional[torch.Tensor]:
    if not batch_matmul_shapes(a, b):
        return None
    npu_batch_matmul = kernel("npu_batch_matmul", MATMUL_PATCH)
    return None if npu_batch_matmul is None else npu_batch_matmul(a, b)


def matmul_function_wrapper(wrapped: Any, instance: Any, args: Tuple[Any, ...],
                            kwargs: Dict[str, Any]) -> Any:
    """``torch.matmul(a, b)`` wrapper; ``out=`` and keyword calls go to the original."""
    if len(args) == 2 and not kwargs:
        result = _npu_matmul(args[0], args[1])
        if result is not None:
            return result
    return wrapped(*args, **kwargs)


def matmul_method_wrapper(wrapped: Any, instance: Any, args: Tuple[Any, ...],
                          kwargs: Dict[str, Any]) -> Any:
    """``Tensor.matmul`` / ``Tensor.__matmul__`` wrapper (``a @ b``)."""
    if instance is not None and len(args) == 1 and not kwargs:
        result = _npu_matmul(instance, args[0])
        if result is not None:
            return result
    return wrapped(*args, **kwargs)


def patch_bool_index(torch_module: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Wrap ``Tensor.__getitem__`` (inherited from ``TensorBase``: undo deletes it again)."""
    patch.wrap(torch_module.Tensor, "__getitem__", bool_index_wrapper)


def patch_batch_matmul(torch_module: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Wrap ``torch.matmul``, ``Tensor.matmul`` and ``Tensor.__matmul__``.

    ``from torch import matmul`` copies in modules imported before torch
    finished (only possible when torch was imported before activation) are
    rebound too; torch's own modules keep the original, since torch's
    internals (decompositions, reference implementations) must not route
    through a device-specific kernel.
    """
    original = torch_module.matmul
    wrapper = patch.wrap(torch_module, "matmul", matmul_function_wrapper)
    torch_internals = tuple(module for name, module in list(sys.modules.items())
                            if module is not None and (name == "torch" or name.startswith("torch.")))
    rebound = patch.rebind(original, wrapper, exclude=torch_internals)
    if rebound:
        patch.note(f"rebound torch.matmul in {', '.join(rebound)}")
    patch.wrap(torch_module.Tensor, "matmul", matmul_method_wrapper)
    patch.wrap(torch_module.Tensor, "__matmul__", matmul_method_wrapper)
