"""mmengine's ``BaseDataPreprocessor.cuda()`` under the device pack.

mmengine 0.10 records the preprocessor's device as
``torch.device(torch.cuda.current_device())``: ``torch.device`` of a bare index means
"that index of the current accelerator", and without one torch raises ``Cannot access
accelerator device when none is available`` (the pack leaves ``torch.device`` alone: it
is a type, not a call to redirect). What the line means on a GPU machine is
``cuda:<current device>``; recorded as that, the preprocessor's later ``.to(device)``
calls go where the pack sends every CUDA device. Applied only when the method's source
still reads the index that way, so a fixed or different mmengine is left untouched.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any

#: The expression that needs an accelerator to evaluate.
INDEX_AS_DEVICE = "torch.device(torch.cuda.current_device())"


def patch_data_preprocessor_cuda(module: Any, patch: Any) -> None:
    """Give ``BaseDataPreprocessor.cuda`` the CUDA device it means, as a device."""
    import torch

    preprocessor = getattr(module, "BaseDataPreprocessor", None)
    original = vars(preprocessor).get("cuda") if preprocessor is not None else None
    if original is None:
        patch.skip("mmengine has no BaseDataPreprocessor.cuda here")
        return
    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):
        patch.skip("the source of BaseDataPreprocessor.cuda cannot be read")
        return
    if INDEX_AS_DEVICE not in source:
        patch.skip(f"BaseDataPreprocessor.cuda does not evaluate {INDEX_AS_DEVICE}")
        return

    @functools.wraps(original)
    def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._device = torch.device("cuda", torch.cuda.current_device())
        # As the original: nn.Module.cuda() with no arguments (the pack's own redirect).
        return super(preprocessor, self).cuda()

    patch.setattr(preprocessor, "cuda", cuda)
    patch.note("BaseDataPreprocessor.cuda records cuda:<current device>, "
               f"not {INDEX_AS_DEVICE}")
