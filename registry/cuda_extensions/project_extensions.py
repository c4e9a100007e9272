"""Stand-ins for the compiled extensions that research projects build themselves.

BEVFusion, DSVT, BEVDet and their kin ship a few CUDA kernels next to their Python
code and compile them with their own ``setup.py`` into a module inside the project's
package (``projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext``). On a machine
without nvcc that module is never built, or it is built but cannot load (a CPU-only
build of a ``.cpp`` that calls into the ``.cu``, a torch it was not built against),
and the project's ``from . import bev_pool_ext`` fails.

An extension is recognised by where it is imported from, the package that holds it,
and by what it exposes, its *kind*:

================  ===================================================================
kind              what the stand-in exposes (same arguments as the compiled module)
================  ===================================================================
``bev_pool``      ``bev_pool_forward``, ``bev_pool_backward`` (BEVFusion)
``bev_pool_v2``   ``bev_pool_v2_forward``, ``bev_pool_v2_backward``,
                  ``bev_pool_v2_backward_opt`` (BEVDet)
``voxel_layer``   ``hard_voxelize``, ``dynamic_voxelize``,
                  ``dynamic_point_to_voxel_forward``/``_backward`` (BEVFusion,
                  mmdet3d 0.x and its forks: the voxel layer of mmcv 1.x)
``ingroup_inds``  ``forward`` (DSVT's ``ingroup_inds_cuda``)
``deformable_``   ``deformable_aggregation_forward``, ``deformable_aggregation_backward``
``aggregation``   (Sparse4D's ``deformable_aggregation_ext``, also SparseDrive's and
                  DiffusionDrive's)
================  ===================================================================

Each declaration is one patch, ``cuda_extensions.<module>``, that runs just before
the holding package's body (``lazypatch.before_import``): it looks for the compiled
module in that package's directory, and tries to load it if it is there. Only when
it is missing or cannot load does the patch provide a module holding the pure-PyTorch
functions (``patch.provide_module``: recorded, undone by ``unpatch``) and report why;
otherwise it reports itself ``skipped`` and the project imports its own build. A
package that does not exist gets nothing: no module is invented above the extension.
When the project's pybind11 sources are in the package's folder (or its ``src/``), the
names they bind are read too: one the stand-in does not implement is still exposed,
raising ``NotImplementedError`` that names it when called, and the report says so.

:data:`PROJECT_EXTENSIONS` lists where the known projects put theirs;
:func:`declare_extension` adds one more (docs/point_cloud_ops.md has a worked example).

This module only declares (standard library and lazypatch): the kernels, and torch,
are imported when a stand-in is provided.
"""

from __future__ import annotations

import sys

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

PACK = "cuda_extensions"
#: The second tag of every patch declared here: selects the project extensions alone.
TAG = "project_extensions"
#: Set on every module this pack provides (the pack's own marker).
MARKER = "__lazypatch_pure_pytorch__"

#: kind -> (implementation submodule of this pack, {exposed name: its attribute there}).
KINDS: "Dict[str, Tuple[str, Dict[str, str]]]" = {
    "bev_pool": ("bev_pool", {name: name for name in (
        "bev_pool_forward", "bev_pool_backward")}),
    "bev_pool_v2": ("bev_pool", {name: name for name in (
        "bev_pool_v2_forward", "bev_pool_v2_backward", "bev_pool_v2_backward_opt")}),
    "voxel_layer": ("voxel_layer", {name: name for name in (
        "hard_voxelize", "dynamic_voxelize", "dynamic_point_to_voxel_forward",
        "dynamic_point_to_voxel_backward")}),
    "ingroup_inds": ("ingroup_inds", {"forward": "ingroup_inds_forward"}),
    "deformable_aggregation": ("deformable_aggregation", {name: name for name in (
        "deformable_aggregation_forward", "deformable_aggregation_backward")}),
}

#: Where known projects import their compiled extension from -> its kind. A project
#: appears under each root it is run from: the repository root of mmdetection3d
#: (``projects.BEVFusion...``, the configs' ``custom_imports``) and its own folder.
PROJECT_EXTENSIONS: "Dict[str, str]" = {
    # mmdetection3d 1.x research projects (projects/BEVFusion/setup.py, projects/DSVT/setup.py)
    "projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext": "bev_pool",
    "projects.BEVFusion.bevfusion.ops.voxel.voxel_layer": "voxel_layer",
    "projects.DSVT.dsvt.ops.ingroup_inds.ingroup_inds_cuda": "ingroup_inds",
    "bevfusion.ops.bev_pool.bev_pool_ext": "bev_pool",
    "bevfusion.ops.voxel.voxel_layer": "voxel_layer",
    "dsvt.ops.ingroup_inds.ingroup_inds_cuda": "ingroup_inds",
    # mmdet3d 0.x forks: MIT's BEVFusion, BEVDet (bev_pool, bev_pool_v2), and the
    # voxel layer that mmdet3d 0.x itself compiled
    "mmdet3d.ops.bev_pool.bev_pool_ext": "bev_pool",
    "mmdet3d.ops.bev_pool_v2.bev_pool_v2_ext": "bev_pool_v2",
    "mmdet3d.ops.voxel.voxel_layer": "voxel_layer",
    # Sparse4D, SparseDrive and DiffusionDrive (projects/mmdet3d_plugin/ops/setup.py
    # builds it next to deformable_aggregation.py), from the repository root and from
    # projects/
    "projects.mmdet3d_plugin.ops.deformable_aggregation_ext": "deformable_aggregation",
    "mmdet3d_plugin.ops.deformable_aggregation_ext": "deformable_aggregation",
}


def declare_extension(module_name: str, like: "Optional[str]" = None,
                      functions: "Optional[Mapping[str, Union[Callable[..., Any], str]]]" = None,
                      *, name: "Optional[str]" = None, enabled: bool = True) -> str:
    """Provide a pure-PyTorch ``module_name`` (a compiled extension inside a package)
    when the compiled one is missing or cannot load; return the patch name.

    ``like`` names a kind of :data:`KINDS` (the stand-in exposes its functions);
    ``functions`` maps more exposed names to callables or ``"package.module:function"``
    strings (resolved when the stand-in is provided), adding to or overriding the
    kind's. Declare it before the package holding the extension is imported. The
    patch, ``cuda_extensions.<module_name>`` unless ``name`` says otherwise, is tagged
    ``cuda_extensions`` and ``project_extensions``, and enabled unless ``enabled=False``.
    """
    package, _, attribute = module_name.rpartition(".")
    if not package or not all(part.isidentifier() for part in module_name.split(".")):
        raise ValueError(f"declare_extension({module_name!r}): give the dotted name of a "
                         f"compiled module inside a package, such as "
                         f"'my_project.ops.bev_pool.bev_pool_ext'")
    if like is not None and like not in KINDS:
        raise ValueError(f"declare_extension({module_name!r}): like={like!r} is not a known "
                         f"kind; known: {', '.join(sorted(KINDS))} (or pass functions=)")
    chosen = dict(functions or {})
    for exposed, value in chosen.items():
        if not (isinstance(exposed, str) and exposed.isidentifier()):
            raise ValueError(f"declare_extension({module_name!r}): {exposed!r} is not a "
                             f"function name")
        if not (callable(value) or (isinstance(value, str) and ":" in value)):
            raise TypeError(f"declare_extension({module_name!r}): the value of {exposed!r} "
                            f"must be a callable or a 'package.module:function' string, "
                            f"got {value!r}")
    if like is None and not chosen:
        raise ValueError(f"declare_extension({module_name!r}): say what it exposes: "
                         f"like=<one of {', '.join(sorted(KINDS))}> or functions={{...}}")
    patch_name = name or f"{PACK}.{module_name}"
    lazypatch.before_import(package, name=patch_name, tags=(PACK, TAG), enabled=enabled)(
        _provide_function(module_name, attribute, like, chosen))
    return patch_name


def _provide_function(module_name: str, attribute: str, like: "Optional[str]",
                      functions: "Dict[str, Any]") -> "Callable[[Any, Any], None]":
    def provide_extension(package: "Any", patch: "Any") -> None:
        if module_name in sys.modules:
            patch.skip(f"{module_name!r} is imported already: it is left as it is")
        problem = _why_not_loadable(module_name, package)
        if problem is None:
            patch.skip(f"{module_name!r} is built and loads: the compiled extension is used, "
                       f"untouched")
        module = type(sys)(module_name, f"Pure-PyTorch stand-in for the compiled extension "
                                        f"{module_name}, provided by lazypatch ({problem}).")
        setattr(module, MARKER, PACK)
        exposed = _resolve_functions(like, functions)
        # What the compiled module would expose, read from the project's pybind11
        # sources when they are there: names the stand-in lacks raise when called.
        bound = _bound_in_sources(package)
        lacking = sorted(set(bound) - set(exposed))
        for exposed_name in lacking:
            exposed[exposed_name] = _unimplemented(module_name, exposed_name, bound[exposed_name])
        for exposed_name, value in exposed.items():
            setattr(module, exposed_name, value)
        module.__all__ = sorted(exposed)  # type: ignore[attr-defined]
        patch.provide_module(module_name, module)
        kind = f"{like} " if like else ""
        provided = sorted(set(exposed) - set(lacking))
        patch.note(f"pure-PyTorch {kind}stand-in ({', '.join(provided)}): {problem}")
        if lacking:
            patch.note(f"the project's sources also bind {', '.join(lacking)}: not implemented "
                       f"here (calling one raises NotImplementedError)")
    provide_extension.__doc__ = (f"Provide a pure-PyTorch {module_name} when the compiled one "
                                 f"is missing or cannot load")
    provide_extension.__qualname__ = f"provide_{module_name.replace('.', '_')}"
    return provide_extension


def _why_not_loadable(module_name: str, package: "Any") -> "Optional[str]":
    """Why the compiled ``module_name`` cannot be used (not built, or the error loading
    it gives), or None when it loads. Only a compiled module is loaded to find out: a
    Python source at that name counts as provided and is not run here."""
    from importlib.machinery import ExtensionFileLoader, PathFinder
    from importlib.util import module_from_spec
    locations = list(getattr(package, "__path__", None) or ())
    spec = PathFinder.find_spec(module_name, locations)
    if spec is None:
        where = ", ".join(locations) or "the package"
        return f"not built (no compiled module in {where})"
    if not isinstance(spec.loader, ExtensionFileLoader):
        return None
    try:
        # Loaded once to see whether it can be; not kept: the project's own import
        # loads it again, as after ``del sys.modules[name]`` (CPython reuses the
        # initialised extension).
        probe = module_from_spec(spec)
        spec.loader.exec_module(probe)
    except (ImportError, OSError) as error:
        return f"the compiled module {spec.origin} cannot load: {type(error).__name__}: {error}"
    if sys.modules.get(module_name) is probe:
        del sys.modules[module_name]   # single-phase initialisation enters it itself
    return None


def _bound_in_sources(package: "Any") -> "Dict[str, str]":
    """Function name -> source file, for every ``<module>.def("name", ...)`` of a
    ``PYBIND11_MODULE`` in the C++/CUDA files of the package's folder and its ``src/``."""
    import os
    import re
    found: "Dict[str, str]" = {}
    for location in list(getattr(package, "__path__", None) or ()):
        for folder in (location, os.path.join(location, "src")):
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                if not name.endswith((".cpp", ".cc", ".cu")):
                    continue
                path = os.path.join(folder, name)
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        source = handle.read()
                except OSError:
                    continue
                module = re.search(r"PYBIND11_MODULE\s*\(\s*\w+\s*,\s*(\w+)\s*\)", source)
                if module is None:
                    continue
                for function in re.findall(
                        rf"\b{module.group(1)}\s*\.\s*def\s*\(\s*\"(\w+)\"", source):
                    found.setdefault(function, path)
    return found


def _unimplemented(module_name: str, function: str, source: str) -> "Callable[..., Any]":
    """A function standing in for one the project binds but the stand-in lacks: raises."""
    message = (f"{module_name}.{function} is bound by the project's {source} but lazypatch's "
               f"pure-PyTorch stand-in for {module_name} has no implementation of it: give one "
               f"with lazypatch.registry.cuda_extensions.declare_extension({module_name!r}, "
               f"..., functions={{{function!r}: ...}}), or build the extension")

    def unimplemented(*args: "Any", **kwargs: "Any") -> "Any":
        raise NotImplementedError(message)
    unimplemented.__name__ = unimplemented.__qualname__ = function
    unimplemented.__doc__ = message
    return unimplemented


def _resolve_functions(like: "Optional[str]", functions: "Dict[str, Any]") -> "Dict[str, Any]":
    from importlib import import_module
    resolved: "Dict[str, Any]" = {}
    if like is not None:
        implementation, names = KINDS[like]
        source = import_module(f"{__package__}.{implementation}")
        resolved.update({exposed: getattr(source, attribute)
                         for exposed, attribute in names.items()})
    for exposed, value in functions.items():
        if isinstance(value, str):
            module_path, _, attribute_path = value.partition(":")
            value = import_module(module_path)
            for part in attribute_path.split("."):
                value = getattr(value, part)
        resolved[exposed] = value
    return resolved


def declare_project_extensions() -> None:
    """Declare :data:`PROJECT_EXTENSIONS`, off until the pack is enabled."""
    for module_name, kind in PROJECT_EXTENSIONS.items():
        declare_extension(module_name, like=kind, enabled=False)
