"""The CUDA surface of the installed torch, enumerated, and its treatment under the pack.

``enumerate_surface()`` lists, from the torch it runs on, the public callables,
classes and settings that take or return a CUDA device, stream, event,
generator, storage or legacy tensor type (section by section below).
``classify()`` says what each one does under the device pack:

* ``redirected``: runs on the target (CPU or NPU) and gives the result the
  program would get on a CUDA machine, on the target device;
* ``honest``: left alone, or answering truthfully about this machine, and
  that answer is what a portable program needs (the column says what it is);
* ``unsupported``: fails, and the column gives the error the user gets.

``python -m lazypatch.registry.device.surface`` rewrites SURFACE.md next to
this file; tests/packs/device/test_surface.py fails when the installed torch
has an entry the table lacks or leaves unclassified. Run it without the pack
enabled: it enumerates torch's own objects. Imports torch when called, never
at import.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Tuple

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "SURFACE.md")
TREATMENTS = ("redirected", "honest", "unsupported")
DEVICE_PARAMETERS = {"device", "device_type", "device_ids", "device_id", "output_device",
                     "map_location", "backend", "activities", "use_cuda", "stream"}
_DEVICE_DOC = re.compile(r"\b(device|stream)s? \(|\bdevice=|\bCUDA\b|\bcuda\b")


def _public(owner: "Any") -> "Iterable[Tuple[str, Any]]":
    for name in sorted(dir(owner)):
        if name.startswith("_"):
            continue
        try:
            yield name, getattr(owner, name)
        except Exception:        # a lazy attribute that cannot load here
            continue


def _from_torch(value: "Any") -> bool:
    module = getattr(value, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def _kind(value: "Any") -> str:
    return "class" if inspect.isclass(value) else "function"


def _mentions_device(value: "Any") -> bool:
    """A ``device``-like parameter in its signature, else in its docstring."""
    try:
        parameters = inspect.signature(value).parameters
        if DEVICE_PARAMETERS & set(parameters):
            return True
    except (TypeError, ValueError):
        pass
    doc = getattr(value, "__doc__", None)
    return isinstance(doc, str) and bool(_DEVICE_DOC.search(doc))


def _cuda_modules() -> "List[str]":
    import torch.cuda
    return ["torch.cuda"] + sorted(
        info.name for info in pkgutil.iter_modules(torch.cuda.__path__, "torch.cuda.")
        if not info.name.rpartition(".")[2].startswith("_"))


def enumerate_surface() -> "Dict[str, str]":
    """Entry point name -> kind ("function", "class", "method", "setting")."""
    import torch
    entries: "Dict[str, str]" = {}
    _add_cuda_modules(torch, entries)
    _add_backends(entries)
    _add_amp(torch, entries)
    _add_torch_namespace(torch, entries)
    _add_device_methods(torch, entries)
    _add_distributed(torch, entries)
    _add_profiler(entries)
    return entries


def _add_cuda_modules(torch: "Any", entries: "Dict[str, str]") -> None:
    """torch.cuda and its public submodules: everything callable that torch defines,
    once (a submodule's re-export of a torch.cuda name is the same entry)."""
    cuda = torch.cuda
    for module_name in _cuda_modules():
        try:
            module = importlib.import_module(module_name)
        except Exception:
            continue
        for name, value in _public(module):
            if inspect.ismodule(value) or not callable(value) or not _from_torch(value):
                continue
            if getattr(torch, name, None) is value:
                continue
            if module is not cuda and getattr(cuda, name, None) is value:
                continue
            entries[f"{module_name}.{name}"] = _kind(value)


def _add_backends(entries: "Dict[str, str]") -> None:
    """Backend settings and queries: cuDNN's and torch.backends.cuda's."""
    cudnn = sys.modules.get("torch.backends.cudnn") or importlib.import_module("torch.backends.cudnn")
    for name in sorted(set(vars(type(cudnn))) | set(vars(cudnn))):
        value = inspect.getattr_static(cudnn, name, None)
        if name.startswith("_") or inspect.ismodule(value):
            continue
        if isinstance(value, property) or type(value).__name__ == "ContextProp":
            entries[f"torch.backends.cudnn.{name}"] = "setting"
        elif callable(value) and _from_torch(value) and not inspect.isclass(value):
            entries[f"torch.backends.cudnn.{name}"] = "function"
    import torch.backends.cuda as backends_cuda
    for name, value in _public(backends_cuda):
        if inspect.ismodule(value) or not _from_torch(value) or name in ("deprecated",):
            continue
        if inspect.isclass(value) and not name.startswith("SDP"):
            continue       # cuFFTPlanCache & co.: helpers behind the settings below
        entries[f"torch.backends.cuda.{name}"] = _kind(value) if callable(value) else "setting"
    entries["torch.backends.cuda.matmul"] = "setting"
    entries["torch.backends.cuda.cufft_plan_cache"] = "setting"


def _add_amp(torch: "Any", entries: "Dict[str, str]") -> None:
    """Automatic mixed precision."""
    for name, value in _public(torch.amp):
        if callable(value) and not inspect.ismodule(value) and _from_torch(value):
            entries[f"torch.amp.{name}"] = _kind(value)
    entries["torch.autocast"] = "class"


def _add_torch_namespace(torch: "Any", entries: "Dict[str, str]") -> None:
    """The torch namespace: callables taking a device (factories, generators, storages,
    default device), serialization."""
    for name, value in _public(torch):
        if inspect.ismodule(value) or not callable(value) or not _from_torch(value) \
                and type(value).__name__ != "builtin_function_or_method":
            continue
        if _takes_device(value) and not name.endswith("Tensor") \
                and not name.endswith("Storage"):
            entries[f"torch.{name}"] = _kind(value)
    for name in ("load", "save", "Generator", "device", "UntypedStorage", "TypedStorage",
                 "set_default_tensor_type", "set_default_device", "get_default_device"):
        entries[f"torch.{name}"] = _kind(getattr(torch, name))
    entries["torch.jit.load"] = entries["torch.jit.save"] = "function"


def _add_device_methods(torch: "Any", entries: "Dict[str, str]") -> None:
    """Methods of tensors, modules and storages that take or answer a device."""
    for owner_name, owner in (("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module),
                              ("torch.UntypedStorage", torch.UntypedStorage),
                              ("torch.TypedStorage", torch.TypedStorage)):
        for name, value in _public(owner):
            if not callable(value) and not isinstance(inspect.getattr_static(owner, name, None),
                                                      property):
                if "cuda" not in name:
                    continue
            if "cuda" in name or name in ("to", "type", "record_stream", "get_device",
                                          "pin_memory", "is_pinned", "to_empty", "device",
                                          "new_empty", "new_zeros", "new_ones", "new_full",
                                          "new_tensor", "new_empty_strided", "share_memory_",
                                          "storage", "untyped_storage", "data_ptr"):
                entries[f"{owner_name}.{name}"] = "method"


def _add_distributed(torch: "Any", entries: "Dict[str, str]") -> None:
    """Distributed: NCCL, backends, device ids; the data-parallel wrappers."""
    import torch.distributed as dist
    if dist.is_available():
        for name, value in _public(dist):
            if inspect.ismodule(value) or not callable(value):
                continue
            if "nccl" in name.lower() or name in ("Backend",) or (
                    not inspect.isclass(value) and _has_parameter(value, {"backend", "device_ids",
                                                                          "device_id"})):
                entries[f"torch.distributed.{name}"] = _kind(value)
    for name in ("DistributedDataParallel", "DataParallel", "data_parallel"):
        entries[f"torch.nn.parallel.{name}"] = _kind(getattr(torch.nn.parallel, name))


def _add_profiler(entries: "Dict[str, str]") -> None:
    """Profiler activities."""
    import torch.profiler
    for name in ("profile", "ProfilerActivity", "supported_activities"):
        entries[f"torch.profiler.{name}"] = _kind(getattr(torch.profiler, name))
    entries["torch.autograd.profiler.profile"] = "class"


def _has_parameter(value: "Any", names: "set") -> bool:
    try:
        return bool(names & set(inspect.signature(value).parameters))
    except (TypeError, ValueError):
        return False


def _takes_device(value: "Any") -> bool:
    """A ``device=`` parameter (signature, else the docstring's argument list)."""
    if _has_parameter(value, DEVICE_PARAMETERS):
        return True
    doc = getattr(value, "__doc__", None)
    return isinstance(doc, str) and bool(re.search(r"\bdevice \(|\bdevice=", doc))


def classify(name: str) -> "Tuple[str, str]":
    """(treatment, how) for an entry; ("unclassified", "") when nothing says."""
    from .factories import FACTORY_NAMES
    from .surface_treatments import EXPLICIT, FACTORY_HOW, FAMILIES, STORAGE_REDIRECTED
    if name in EXPLICIT:
        return EXPLICIT[name]
    owner, _, short = name.rpartition(".")
    if owner == "torch" and short in FACTORY_NAMES:
        return "redirected", FACTORY_HOW
    if owner == "torch.Tensor" and short.startswith("new_"):
        return "redirected", "device= CUDA becomes the target"
    if owner in ("torch.UntypedStorage", "torch.TypedStorage") and short in STORAGE_REDIRECTED:
        return "redirected", STORAGE_REDIRECTED[short]
    for prefix, treatment, how in FAMILIES:
        if name.startswith(prefix):
            return treatment, how
    return "unclassified", ""


HEADER = """# The CUDA surface under the device pack

Generated by `python -m lazypatch.registry.device.surface` from torch {version}
(registry/device/surface.py enumerates, surface_treatments.py classifies).
tests/packs/device/test_surface.py fails when the installed torch has an entry
this table lacks or leaves unclassified, and checks that every `redirected`
entry is really replaced or wrapped under the pack.

* **redirected**: runs on the target (CPU or NPU) with the result a CUDA machine gives,
  on the target device (answers below are the CPU target's).
* **honest**: unchanged or truthful about this machine; the column says what it answers.
* **unsupported**: fails; the column gives the error.

Counts: {counts}.

| entry | kind | treatment | how / error |
|---|---|---|---|
"""


def render(entries: "Dict[str, str]", version: str) -> str:
    """The markdown table for ``entries`` (name -> kind)."""
    rows = []
    counts: "Dict[str, int]" = {}
    for name in sorted(entries):
        treatment, how = classify(name)
        counts[treatment] = counts.get(treatment, 0) + 1
        rows.append(f"| `{name}` | {entries[name]} | {treatment} | {how.replace('|', '/')} |")
    summary = ", ".join(f"{counts.get(t, 0)} {t}" for t in TREATMENTS + ("unclassified",)
                        if counts.get(t) or t != "unclassified")
    return HEADER.format(version=version, counts=f"{len(entries)} entries: {summary}") \
        + "\n".join(rows) + "\n"


def parse(text: str) -> "Dict[str, Tuple[str, str, str]]":
    """The rows of a SURFACE.md: name -> (kind, treatment, how)."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (\w+) \| (\w+) \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3), match.group(4))
    return rows


def main() -> None:
    import torch
    with open(TABLE, "w") as handle:
        handle.write(render(enumerate_surface(), torch.__version__.split("+")[0]))
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
