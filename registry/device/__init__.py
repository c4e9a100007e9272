"""The device pack: run CUDA-written PyTorch code on an Ascend NPU or the CPU.

Off by default (tag ``device``); turn it on with ``LAZYPATCH_ENABLE=device``.
Each group of redirects is its own named patch, applied when the torch module
it changes is imported, and undone exactly by ``lazypatch.unpatch_all()``.

Device arguments are *parsed* as devices ("cuda", "cuda:1",
``torch.device("cuda", 1)``, an integer index where the API means a device),
never rewritten as substrings, so a file path containing "cuda" is left
alone. ``torch.cuda.is_available()`` stays honest unless
``LAZYPATCH_CUDA_AVAILABLE=1``.

This module only declares patches (standard library and lazypatch): the
implementation lives in submodules imported by the patch functions, when
torch is already being imported.
"""

from __future__ import annotations

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "device"
TAGS = (PACK,)
OPT_IN = True
TARGETS = ("torch", "torch_npu", "mmengine")
REQUIRES = ()

import lazypatch

from .. import declare_opt_in_settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List

declare_opt_in_settings()   # the pack's variables (idempotent)



def _declare(target: str, name: str, priority: float = 0):
    """Register a device patch: disabled by default, tagged ``device``.

    The first device patch applied in a process also carries the redirect
    counters in its report notes (read when the report is built, so they
    are current in ``lazypatch.report()`` and in ``LAZYPATCH_REPORT``).
    """
    def decorate(function: "Any") -> "Any":
        def apply(module: "Any", patch: "Any") -> None:
            function(module, patch)
            if not _REDIRECT_NOTES_ATTACHED:
                _REDIRECT_NOTES_ATTACHED.append(patch.name)
                patch.note_provider(_redirect_notes)
        apply.__doc__, apply.__qualname__ = function.__doc__, function.__qualname__
        lazypatch.when_imported(target, name=f"{PACK}.{name}", tags=TAGS,
                                enabled=False, priority=priority)(apply)
        return function
    return decorate


_REDIRECT_NOTES_ATTACHED: "List[str]" = []


def _redirect_notes() -> "List[Dict[str, Any]]":
    """Rows of the report's "what ran where" section: each redirected API, the device
    its calls went to, how many and the first line of the user's code that made one."""
    from .observe import rows
    # One counter serves every patch of the pack: the row names the pack, not the
    # patch that happened to attach the provider.
    return [{"what": row["api"], "where": f"{row['target']} (asked for cuda)",
             "calls": row["calls"], "first_call_site": row["first_call_site"],
             "by": "device pack"} for row in rows()]


@_declare("torch", "factories")
def factories(torch: "Any", patch: "Any") -> None:
    """Factory functions (torch.zeros, torch.tensor, ...): device= "cuda" goes to the target."""
    from .factories import patch_factories
    patch_factories(torch, patch)


@_declare("torch", "generator")
def generator(torch: "Any", patch: "Any") -> None:
    """torch.Generator(device="cuda") creates a generator on the target device."""
    from .factories import patch_generator
    patch_generator(torch, patch)


@_declare("torch.utils._device", "device_context")
def device_context(module: "Any", patch: "Any") -> None:
    """``with torch.device("cuda"):`` and torch.set_default_device("cuda") use the target."""
    from .factories import patch_device_context
    patch_device_context(module, patch)


@_declare("torch", "tensor_methods")
def tensor_methods(torch: "Any", patch: "Any") -> None:
    """Tensor.to/cuda/new_*/pin_memory: CUDA devices go to the target."""
    from .methods import patch_tensor_methods
    patch_tensor_methods(torch, patch)


@_declare("torch", "legacy_types")
def legacy_types(torch: "Any", patch: "Any") -> None:
    """torch.cuda.FloatTensor & co. (classes building tensors on the target),
    Tensor.type(torch.cuda.HalfTensor / "torch.cuda.FloatTensor"), set_default_tensor_type."""
    from .legacy_types import patch_legacy_types, set_default_tensor_type_function, type_function
    patch_legacy_types(torch.cuda, patch)
    patch.setattr(torch.Tensor, "type", type_function(torch.Tensor.type))
    if "set_default_tensor_type" in vars(torch):
        patch.setattr(torch, "set_default_tensor_type",
                      set_default_tensor_type_function(torch.set_default_tensor_type))


@_declare("torch", "storages")
def storages(torch: "Any", patch: "Any") -> None:
    """torch.UntypedStorage(n, device="cuda"), torch.cuda.FloatStorage(n), storage.cuda()
    and storage.to(device="cuda") build storages on the target."""
    from .storage import patch_storages
    patch_storages(torch, patch)


@_declare("torch.nn.modules.module", "module_methods")
def module_methods(module: "Any", patch: "Any") -> None:
    """nn.Module.to/cuda/to_empty: CUDA devices go to the target."""
    from .methods import patch_module_methods
    patch_module_methods(module, patch)


@_declare("mmengine.model.base_model.data_preprocessor", "mmengine_data_preprocessor")
def mmengine_data_preprocessor(module: "Any", patch: "Any") -> None:
    """mmengine's BaseDataPreprocessor.cuda() records cuda:<current device> instead of
    torch.device(<index>), which needs a real accelerator to evaluate."""
    from .mmengine_devices import patch_data_preprocessor_cuda
    patch_data_preprocessor_cuda(module, patch)


@_declare("torch", "load")
def load(torch: "Any", patch: "Any") -> None:
    """torch.load: CUDA storage locations and map_location (str, device, dict,
    callable) go to the target; file paths are never touched. torch.jit.load too."""
    from .serialization import patch_load
    patch_load(torch, patch)


@_declare("torch.cuda", "cuda_namespace")
def cuda_namespace(cuda: "Any", patch: "Any") -> None:
    """torch.cuda device, memory, seed, stream and event functions use the target's."""
    from .cuda_api import patch_cuda_namespace
    from .cuda_classes import patch_cuda_classes
    patch_cuda_namespace(cuda, patch)
    patch_cuda_classes(cuda, patch)


@_declare("torch.cuda", "cuda_available")
def cuda_available(cuda: "Any", patch: "Any") -> None:
    """torch.cuda.is_available(): True when LAZYPATCH_CUDA_AVAILABLE=1 (except for
    torch itself and LAZYPATCH_CUDA_AVAILABLE_EXCLUDE modules); honest otherwise."""
    from .cuda_api import patch_cuda_available
    patch_cuda_available(cuda, patch)


@_declare("torch.cuda.nvtx", "nvtx")
def nvtx(module: "Any", patch: "Any") -> None:
    """torch.cuda.nvtx ranges become torch.profiler record_function ranges."""
    from .cuda_api import patch_nvtx
    patch_nvtx(module, patch)


@_declare("torch.amp", "amp")
def amp(module: "Any", patch: "Any") -> None:
    """autocast / GradScaler for "cuda" (torch.cuda.amp included) use the target device type."""
    from .amp import patch_amp
    patch_amp(module, patch)


@_declare("torch.distributed", "distributed")
def distributed(module: "Any", patch: "Any") -> None:
    """init_process_group/new_group backend "nccl" -> gloo (CPU) or hccl (NPU)."""
    from .distributed import patch_distributed
    patch_distributed(module, patch)


@_declare("torch.nn.parallel", "parallel")
def parallel(module: "Any", patch: "Any") -> None:
    """DistributedDataParallel / DataParallel device_ids and output_device."""
    from .distributed import patch_parallel
    patch_parallel(module, patch)


@_declare("torch.profiler", "profiler")
def profiler(module: "Any", patch: "Any") -> None:
    """torch.profiler.profile activities: CUDA -> NPU (torch_npu.profiler) or dropped on CPU."""
    from .npu import patch_profiler
    patch_profiler(module, patch)


@_declare("torch_npu", "npu_format")
def npu_format(module: "Any", patch: "Any") -> None:
    """torch.npu.config.allow_internal_format = False unless LAZYPATCH_ALLOW_INTERNAL_FORMAT=1."""
    from .npu import patch_internal_format
    patch_internal_format(module, patch)


def redirect_report() -> "List[Dict[str, Any]]":
    """Per redirected API: ``api``, ``calls`` (redirected calls so far),
    ``first_call_site`` ("file:line" in user code) and ``target`` device type.

    Cheap to leave on: the call site is looked up once per API, on its first
    redirected call. Imports nothing heavy.
    """
    from .observe import rows
    return rows()


def target_device() -> "Dict[str, str]":
    """The chosen target: ``{"device": "cpu"|"npu"|..., "reason": why}``.

    Resolves it (importing torch, and torch_npu when present) if no redirect
    has needed it yet.
    """
    from .target import resolve
    target = resolve()
    return {"device": target.type, "reason": target.reason}
