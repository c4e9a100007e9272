"""Each CUDA entry point's treatment under the device pack (see surface.py).

``EXPLICIT`` names entries one by one; ``FAMILIES`` covers whole modules
whose entries share one answer (a new entry in such a module is classified by
its family: every one of them fails, or answers, the same way). The "how"
texts describe the CPU target; on an NPU a redirected ``torch.cuda.<name>``
calls ``torch.npu.<name>``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Tuple

R, H, U = "redirected", "honest", "unsupported"
NO_CUDA_LIBRARY = "fails in torch: `AttributeError: module 'torch._C' has no attribute '_cuda_...'`"
DUMMY = "fails in torch: `RuntimeError: Tried to instantiate dummy base class ...`"
NVML = "fails in torch: `ModuleNotFoundError: nvidia-ml-py does not seem to be installed`"

_CUDA_REDIRECTED = {
    "device_count": "1", "current_device": "0", "set_device": "no-op",
    "synchronize": "no-op (CPU work is synchronous)", "empty_cache": "no-op",
    "ipc_collect": "no-op", "is_initialized": "True", "init": "no-op",
    "memory_allocated": "0", "max_memory_allocated": "0", "memory_reserved": "0",
    "max_memory_reserved": "0", "memory_cached": "0", "max_memory_cached": "0",
    "reset_peak_memory_stats": "no-op", "reset_max_memory_allocated": "no-op",
    "reset_max_memory_cached": "no-op", "reset_accumulated_memory_stats": "no-op",
    "memory_stats": "{}", "memory_summary": "a line saying there is no device memory",
    "mem_get_info": "(free, total) host memory", "manual_seed": "seeds the CPU generator",
    "manual_seed_all": "seeds the CPU generator", "seed": "reseeds the CPU generator",
    "seed_all": "reseeds the CPU generator", "initial_seed": "the CPU generator's",
    "get_rng_state": "the CPU generator's state", "set_rng_state": "sets the CPU generator's",
    "get_rng_state_all": "[CPU generator state]", "set_rng_state_all": "sets the CPU generator's",
    "get_device_name": "'cpu'", "get_device_properties": "name 'cpu', total host memory, CPU count",
    "get_device_capability": "(0, 0): capability checks take their portable path",
    "is_bf16_supported": "True", "is_current_stream_capturing": "False",
    "set_per_process_memory_fraction": "no-op", "get_per_process_memory_fraction": "1.0",
    "memory_snapshot": "[]", "get_sync_debug_mode": "0", "set_sync_debug_mode": "no-op",
    "can_device_access_peer": "False (one device)", "get_allocator_backend": "'native'",
    "Stream": "the same class; instances hold a CPU stream (work is in order)",
    "ExternalStream": "the same class; a CPU stream (the CUDA stream pointer cannot exist here)",
    "Event": "the same class; instances time with the wall clock (exact: CPU work is synchronous)",
    "StreamContext": "unchanged class; works through the redirected stream functions",
    "stream": "a StreamContext that selects nothing (one CPU stream), built without "
              "torch's per-call accelerator probe",
    "current_stream": "a torch.cuda.Stream standing for the CPU stream",
    "default_stream": "a torch.cuda.Stream standing for the CPU stream",
    "set_stream": "no-op",
    "device": "unchanged class; selects nothing, through the redirected device exchange",
    "device_of": "unchanged class; selects nothing, through the redirected device exchange",
}

EXPLICIT: "Dict[str, Tuple[str, str]]" = {
    **{f"torch.cuda.{name}": (R, how) for name, how in _CUDA_REDIRECTED.items()},
    **{f"torch.cuda.{scalar}Tensor": (R, "a class: builds the tensor with torch."
                                         f"{scalar}Tensor's constructor on the target; "
                                         "isinstance accepts target tensors of that dtype")
       for scalar in ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int",
                      "Long", "Short")},
    **{f"torch.cuda.{scalar}Storage": (R, "unchanged class; built through the redirected "
                                          "torch.UntypedStorage(device=...)")
       for scalar in ("BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat",
                      "Double", "Float", "Half", "Int", "Long", "Short")},
    "torch.cuda.is_available": (H, "False; True with LAZYPATCH_CUDA_AVAILABLE=1, except for torch "
                                   "and LAZYPATCH_CUDA_AVAILABLE_EXCLUDE modules"),
    "torch.cuda.get_arch_list": (H, "[]"), "torch.cuda.get_gencode_flags": (H, "''"),
    "torch.cuda.is_tf32_supported": (H, "torch's own answer"),
    "torch.cuda.cudart": (H, "None: there is no CUDA runtime"),
    "torch.cuda.list_gpu_processes": (H, "a line saying pynvml is missing"),
    "torch.cuda.host_memory_stats": (H, "empty statistics"),
    "torch.cuda.host_memory_stats_as_nested_dict": (H, "empty statistics"),
    "torch.cuda.memory_stats_as_nested_dict": (H, "empty statistics"),
    "torch.cuda.reset_accumulated_host_memory_stats": (H, "no-op"),
    "torch.cuda.reset_peak_host_memory_stats": (H, "no-op"),
    "torch.cuda.CudaError": (H, "exception class, never raised here"),
    "torch.cuda.DeferredCudaCallError": (H, "exception class, never raised here"),
    "torch.cuda.cudaStatus": (H, "constants class"),
    "torch.cuda.check_error": (U, "fails in torch: `AttributeError: 'NoneType' object has no "
                                  "attribute 'cudaError'` (no CUDA runtime)"),
    "torch.cuda.CUDAGraph": (U, DUMMY), "torch.cuda.graph": (U, DUMMY + " (on entering)"),
    "torch.cuda.make_graphed_callables": (U, DUMMY), "torch.cuda.graph_pool_handle": (U, DUMMY),
    "torch.cuda.MemPool": (U, DUMMY), "torch.cuda.use_mem_pool": (U, "fails in torch: "
                                                                     "`AttributeError` (no pool)"),
    "torch.cuda.GreenContext": (U, "fails in torch: no CUDA green contexts on this build"),
    "torch.cuda.CUDAPluggableAllocator": (U, "fails in torch: `OSError` or missing "
                                             "`torch._C._cuda_*` (no CUDA allocator)"),
    "torch.cuda.change_current_allocator": (U, NO_CUDA_LIBRARY),
    "torch.cuda.caching_allocator_alloc": (U, "fails: `AttributeError: 'Stream' object has no "
                                              "attribute 'cuda_stream'` (no device memory)"),
    "torch.cuda.caching_allocator_delete": (U, NO_CUDA_LIBRARY),
    "torch.cuda.caching_allocator_enable": (U, NO_CUDA_LIBRARY),
    "torch.cuda.caching_allocator_disabled": (U, NO_CUDA_LIBRARY),
    "torch.cuda.current_blas_handle": (U, NO_CUDA_LIBRARY),
    "torch.cuda.current_solver_handle": (U, NO_CUDA_LIBRARY),
    "torch.cuda.get_stream_from_external": (U, NO_CUDA_LIBRARY),
    "torch.cuda.utilization": (U, NVML), "torch.cuda.temperature": (U, NVML),
    "torch.cuda.power_draw": (U, NVML), "torch.cuda.clock_rate": (U, NVML),
    "torch.cuda.memory_usage": (U, NVML), "torch.cuda.device_memory_used": (U, NVML),
    "torch.cuda.amp.autocast": (R, "torch.autocast on the target device type, same dtype"),
    "torch.cuda.amp.GradScaler": (R, "torch.amp.GradScaler on the target device type"),
    "torch.cuda.amp.custom_fwd": (R, "through the redirected torch.amp.custom_fwd"),
    "torch.cuda.amp.custom_bwd": (R, "through the redirected torch.amp.custom_bwd"),
    "torch.cuda.amp.amp_definitely_not_available": (H, "torch's own answer"),
    "torch.amp.autocast": (R, 'device_type "cuda" becomes the target\'s; dtype unchanged'),
    "torch.autocast": (R, 'device_type "cuda" becomes the target\'s; dtype unchanged'),
    "torch.amp.GradScaler": (R, 'device "cuda" becomes the target\'s'),
    "torch.GradScaler": (R, 'the same class as torch.amp.GradScaler: device "cuda" becomes the '
                            "target's"),
    "torch.amp.custom_fwd": (R, 'device_type="cuda" becomes the target\'s'),
    "torch.amp.custom_bwd": (R, 'device_type="cuda" becomes the target\'s'),
    "torch.amp.is_autocast_available": (H, "torch's own answer for the type asked"),
    "torch.load": (R, "CUDA storage locations and every map_location form go to the target"),
    "torch.jit.load": (R, "a CUDA map_location becomes the target; none on the CPU target "
                          "loads CUDA-saved tensors onto the CPU"),
    "torch.save": (H, "unchanged: saves the target tensors with their real location"),
    "torch.jit.save": (H, "unchanged"),
    "torch.Generator": (R, 'a class accepting isinstance; device "cuda" becomes the target'),
    "torch.device": (H, 'unchanged: torch.device("cuda") is a valid value; its uses are '
                        "redirected"),
    "torch.UntypedStorage": (R, "same class; device= is translated in __new__"),
    "torch.TypedStorage": (R, "same class; goes through the redirected UntypedStorage"),
    "torch.set_default_tensor_type": (R, "a legacy CUDA type becomes the CPU type of its dtype "
                                         "(and the target as default device off the CPU)"),
    "torch.set_default_device": (R, "through the DeviceContext it installs, which translates "
                                    "the device"),
    "torch.get_default_device": (H, "the real default device (the target after a redirect)"),
    "torch.Stream": (H, 'unchanged: the generic accelerator stream; torch.Stream("cuda") fails '
                        "in torch as without the pack"),
    "torch.Event": (H, "unchanged: the generic accelerator event, as torch.Stream"),
    "torch.compile": (H, "unchanged: compiles for the device of the inputs (the target)"),
    "torch.from_dlpack": (H, "unchanged: keeps the producer's device"),
    "torch.get_device_module": (H, 'unchanged: get_device_module("cuda") is torch.cuda, '
                                   "itself redirected"),
    "torch.segment_reduce": (H, "unchanged: runs on its inputs' device"),
    "torch.tensordot": (H, "unchanged: runs on its inputs' device"),
    "torch.Tensor.cuda": (R, "moves to the target"),
    "torch.Tensor.to": (R, "CUDA devices become the target; dtype and other forms unchanged"),
    "torch.Tensor.type": (R, "legacy CUDA types (class or name) become target dtype moves; "
                             "x.type() answers the real type"),
    "torch.Tensor.record_stream": (R, "no-op on the CPU; the target stream on an NPU"),
    "torch.Tensor.pin_memory": (R, "the tensor itself on the CPU (nothing to copy to)"),
    "torch.Tensor.is_cuda": (H, "False; with LAZYPATCH_CUDA_AVAILABLE=1 True for tensors "
                                "on the target, except for torch and "
                                "LAZYPATCH_CUDA_AVAILABLE_EXCLUDE modules"),
    "torch.Tensor.get_device": (H, "-1 (a CPU tensor)"),
    "torch.Tensor.is_pinned": (H, "False"), "torch.Tensor.data_ptr": (H, "unchanged"),
    "torch.Tensor.share_memory_": (H, "unchanged"), "torch.Tensor.storage": (H, "unchanged"),
    "torch.Tensor.untyped_storage": (H, "unchanged"),
    "torch.nn.Module.cuda": (R, "moves to the target"),
    "torch.nn.Module.to": (R, "CUDA devices become the target"),
    "torch.nn.Module.to_empty": (R, "device= becomes the target"),
    "torch.nn.Module.type": (H, "unchanged: casts parameters with Tensor.type (legacy CUDA "
                                "types therefore redirected)"),
    "torch.distributed.init_process_group": (R, '"nccl" becomes gloo (CPU) / hccl (NPU); '
                                                "device_id translated"),
    "torch.distributed.new_group": (R, '"nccl" becomes gloo / hccl'),
    "torch.distributed.new_subgroups": (R, "goes through the redirected new_group"),
    "torch.distributed.new_subgroups_by_enumeration": (R, "goes through the redirected new_group"),
    "torch.distributed.barrier": (R, "device_ids translated (dropped on the CPU)"),
    "torch.distributed.is_nccl_available": (H, "torch's answer; True with "
                                               "LAZYPATCH_CUDA_AVAILABLE=1"),
    "torch.distributed.is_backend_available": (H, "torch's answer"),
    "torch.distributed.Backend": (H, "unchanged names; NCCL requests are redirected where made"),
    "torch.distributed.split_group": (U, "fails in torch: splitting needs an NCCL process group"),
    "torch.nn.parallel.DistributedDataParallel": (R, "device_ids/output_device translated "
                                                     "(dropped on the CPU)"),
    "torch.nn.parallel.DataParallel": (R, "device_ids/output_device translated (dropped on the "
                                          "CPU: the module runs as is)"),
    "torch.nn.parallel.data_parallel": (U, "fails in torch: `RuntimeError: device type could "
                                           "not be determined`"),
    "torch.profiler.profile": (R, "CUDA activity becomes NPU activity, or is dropped on the CPU"),
    "torch.profiler.ProfilerActivity": (H, "unchanged enum"),
    "torch.profiler.supported_activities": (H, "the real ones (CPU)"),
    "torch.autograd.profiler.profile": (H, "unchanged: use_cuda=True records CPU events only"),
    "torch.backends.cuda.matmul": (H, "settable flags (allow_tf32, ...); no effect on the CPU"),
    "torch.backends.cuda.cufft_plan_cache": (H, "settable; no effect on the CPU"),
    "torch.backends.cuda.is_built": (H, "False"),
}

# Factories: device= "cuda" becomes the target (registry/device/factories.py).
_FACTORY_HOW = "device= CUDA becomes the target; TorchScript sees the original operator"

FAMILIES: "List[Tuple[str, str, str]]" = [
    ("torch.cuda.nvtx.", R, "ranges become torch.profiler record_function ranges"),
    ("torch.cuda.sparse.", U, "fails in torch: `TypeError: type torch.cuda.sparse.FloatTensor "
                              "not available. Torch not compiled with CUDA enabled.`"),
    ("torch.cuda.tunable.", U, NO_CUDA_LIBRARY),
    ("torch.cuda.nccl.", U, NO_CUDA_LIBRARY + " (is_available answers False); use "
                            "torch.distributed, whose nccl is redirected"),
    ("torch.cuda.comm.", U, NO_CUDA_LIBRARY + " (multi-GPU copies)"),
    ("torch.cuda.gds.", U, "fails in torch: GPUDirect Storage needs CUDA"),
    ("torch.cuda.profiler.", U, "fails in torch: `AttributeError: 'NoneType' object has no "
                                "attribute 'cudaProfilerStart'`; use torch.profiler"),
    ("torch.cuda.jiterator.", U, "fails in torch: `AssertionError: Jiterator is only supported "
                                 "on CUDA and ROCm GPUs`"),
    ("torch.backends.cudnn.", H, "settable as usual; no effect on the CPU"),
    ("torch.backends.cuda.", H, "torch's own answers (flash/efficient attention: False where "
                                "unavailable); settings are kept and have no effect on the CPU"),
    ("torch.UntypedStorage.", H, "unchanged (is_cuda False, get_device -1)"),
    ("torch.TypedStorage.", H, "unchanged (is_cuda False, get_device -1)"),
]
STORAGE_REDIRECTED = {"cuda": "moves to the target, through the redirected to",
                      "to": "device= CUDA becomes the target"}
FACTORY_HOW = _FACTORY_HOW
