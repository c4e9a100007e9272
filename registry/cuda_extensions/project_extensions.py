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
``geometric_``    ``geometric_kernel_attn_cuda_forward``, ``..._backward`` (MapTR's
``kernel_``       top-level ``GeometricKernelAttention``)
``attention``
``multi_scale_``  ``ms_deform_attn_forward``, ``ms_deform_attn_backward`` (Deformable-DETR's
``deformable_``   top-level ``MultiScaleDeformableAttention``, also built by DINO,
``attention``     Mask2Former and PanoOcc)
``mmdet3d_*``     mmdetection3d 0.17's op modules, under their 0.17 names (``ball_query``,
                  ``knn``, ``group_points``, ``interpolate``, ``gather_points``,
                  ``furthest_point_sample``, ``assign_score_withk``, ``roiaware_pool3d``,
                  ``iou3d``, ``sparse_conv``: see mmdet3d_ops)
================  ===================================================================

``like`` may also name a module of the pack's own stand-ins (``STAND_INS`` of the
package: ``"flash_attn.flash_attn_interface"``, ``"torch_scatter"``, ...): a project
that vendors such a library under a name of its own gets the same functions.

A top-level module (``GeometricKernelAttention``, installed by its own ``setup.py``)
has no package to watch: it is a stand-in boundary (``lazypatch.stand_in``,
``cuda_extensions.<module>``) that provides an empty module only when nothing installed
provides it, and a patch ``cuda_extensions.<module>.pytorch`` that fills it; one that is
installed is imported and left alone, even when it then fails to load.

Each declaration inside a package is one patch, ``cuda_extensions.<module>``, that runs
just before the holding package's body (``lazypatch.before_import``): it looks for the compiled
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

#: kind -> (implementation module relative to this pack, {exposed name: its attribute there}).
KINDS: "Dict[str, Tuple[str, Dict[str, str]]]" = {
    "bev_pool": ("bev_pool", {name: name for name in (
        "bev_pool_forward", "bev_pool_backward")}),
    "bev_pool_v2": ("bev_pool", {name: name for name in (
        "bev_pool_v2_forward", "bev_pool_v2_backward", "bev_pool_v2_backward_opt")}),
    "voxel_layer": ("voxel_layer", {name: name for name in (
        "hard_voxelize", "dynamic_voxelize", "dynamic_point_to_voxel_forward",
        "dynamic_point_to_voxel_backward")}),
    "ingroup_inds": ("ingroup_inds", {"forward": "ingroup_inds_forward"}),
    "deformable_aggregation": ("..shared.deformable_aggregation", {name: name for name in (
        "deformable_aggregation_forward", "deformable_aggregation_backward")}),
    "geometric_kernel_attention": ("geometric_kernel_attention", {name: name for name in (
        "geometric_kernel_attn_cuda_forward", "geometric_kernel_attn_cuda_backward")}),
    "multi_scale_deformable_attention": ("multi_scale_deformable_attention", {
        name: name for name in ("ms_deform_attn_forward", "ms_deform_attn_backward")}),
    # mmdetection3d 0.17's own op modules (mmdet3d_ops: on the OpenMMLab pack's kernels)
    **{f"mmdet3d_{kind}": ("mmdet3d_ops", names) for kind, names in {
        "ball_query": {"ball_query_wrapper": "ball_query_wrapper"},
        "knn": {"knn_wrapper": "knn_wrapper"},
        "group_points": {"forward": "group_points_wrapper",
                         "backward": "group_points_grad_wrapper"},
        "interpolate": {name: name for name in (
            "three_nn_wrapper", "three_interpolate_wrapper", "three_interpolate_grad_wrapper")},
        "gather_points": {name: name for name in (
            "gather_points_wrapper", "gather_points_grad_wrapper")},
        "furthest_point_sample": {name: name for name in (
            "furthest_point_sampling_wrapper", "furthest_point_sampling_with_dist_wrapper")},
        "assign_score_withk": {name: name for name in (
            "assign_score_withk_forward_wrapper", "assign_score_withk_backward_wrapper")},
        "roiaware_pool3d": {"forward": "roiaware_pool3d_gpu",
                            "backward": "roiaware_pool3d_gpu_backward",
                            **{name: name for name in ("points_in_boxes_gpu",
                                                       "points_in_boxes_batch",
                                                       "points_in_boxes_cpu")}},
        "iou3d": {name: name for name in (
            "boxes_overlap_bev_gpu", "boxes_iou_bev_gpu", "nms_gpu", "nms_normal_gpu")},
        "sparse_conv": {**{f"get_indice_pairs_{n}d": f"get_indice_pairs_{n}d"
                           for n in (2, 3, 4)},
                        **{f"{name}_{precision}": name
                           for name in ("indice_conv", "fused_indice_conv",
                                        "indice_conv_backward", "indice_maxpool",
                                        "indice_maxpool_backward")
                           for precision in ("fp32", "half")}},
    }.items()},
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
    # ... and the other op modules mmdet3d 0.17's setup.py builds (BEVDet's fork, MapTR's
    # vendored mmdetection3d 0.17.2)
    "mmdet3d.ops.ball_query.ball_query_ext": "mmdet3d_ball_query",
    "mmdet3d.ops.knn.knn_ext": "mmdet3d_knn",
    "mmdet3d.ops.group_points.group_points_ext": "mmdet3d_group_points",
    "mmdet3d.ops.interpolate.interpolate_ext": "mmdet3d_interpolate",
    "mmdet3d.ops.gather_points.gather_points_ext": "mmdet3d_gather_points",
    "mmdet3d.ops.furthest_point_sample.furthest_point_sample_ext":
        "mmdet3d_furthest_point_sample",
    "mmdet3d.ops.paconv.assign_score_withk_ext": "mmdet3d_assign_score_withk",
    "mmdet3d.ops.roiaware_pool3d.roiaware_pool3d_ext": "mmdet3d_roiaware_pool3d",
    "mmdet3d.ops.iou3d.iou3d_cuda": "mmdet3d_iou3d",
    "mmdet3d.ops.spconv.sparse_conv_ext": "mmdet3d_sparse_conv",
    # Sparse4D, SparseDrive and DiffusionDrive (projects/mmdet3d_plugin/ops/setup.py
    # builds it next to deformable_aggregation.py), from the repository root and from
    # projects/
    "projects.mmdet3d_plugin.ops.deformable_aggregation_ext": "deformable_aggregation",
    "mmdet3d_plugin.ops.deformable_aggregation_ext": "deformable_aggregation",
    # MapTR (projects/mmdet3d_plugin/maptr/modules/ops/geometric_kernel_attn/setup.py
    # installs it top-level; its plugin imports it at import time)
    "GeometricKernelAttention": "geometric_kernel_attention",
    # Deformable-DETR's multi-scale deformable attention (its ops/setup.py installs it
    # top-level; DINO, Mask2Former and PanoOcc ship the same one)
    "MultiScaleDeformableAttention": "multi_scale_deformable_attention",
}


def declare_extension(module_name: str, like: "Optional[str]" = None,
                      functions: "Optional[Mapping[str, Union[Callable[..., Any], str]]]" = None,
                      *, name: "Optional[str]" = None, enabled: bool = True) -> str:
    """Provide a pure-PyTorch ``module_name`` (a compiled extension inside a package, or a
    top-level one) when the compiled one is missing or cannot load; return the patch name.

    ``like`` names a kind of :data:`KINDS` or a module the pack stands in for
    (``"flash_attn.flash_attn_interface"``): the stand-in exposes its functions;
    ``functions`` maps more exposed names to callables or ``"package.module:function"``
    strings (resolved when the stand-in is provided), adding to or overriding the
    kind's. Declare it before the extension (or the package holding it) is imported. The
    patch, ``cuda_extensions.<module_name>`` unless ``name`` says otherwise, is tagged
    ``cuda_extensions`` and ``project_extensions``, and enabled unless ``enabled=False``.
    """
    if not isinstance(module_name, str) or not module_name or not all(
            part.isidentifier() for part in module_name.split(".")):
        raise ValueError(f"declare_extension({module_name!r}): give the dotted name of the "
                         f"compiled module as the project imports it, such as "
                         f"'my_project.ops.bev_pool.bev_pool_ext' or 'GeometricKernelAttention'")
    if like is not None and not (isinstance(like, str) and like in known_kinds()):
        raise ValueError(f"declare_extension({module_name!r}): like={like!r} is not a known "
                         f"kind; known: {', '.join(sorted(known_kinds()))} (or pass functions=)")
    if functions is not None and not hasattr(functions, "items"):
        raise TypeError(f"declare_extension({module_name!r}): functions must map exposed "
                        f"names to callables or 'package.module:function' strings, got "
                        f"{type(functions).__name__}")
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
                         f"like=<one of {', '.join(sorted(known_kinds()))}> or functions={{...}}")
    if name is not None and not (isinstance(name, str) and name):
        raise ValueError(f"declare_extension({module_name!r}): name must be a non-empty "
                         f"patch name, got {name!r}")
    patch_name = name or f"{PACK}.{module_name}"
    package, _, attribute = module_name.rpartition(".")
    if not package:
        return _declare_top_level(module_name, like, chosen, patch_name, enabled)
    lazypatch.before_import(package, name=patch_name, tags=(PACK, TAG), enabled=enabled)(
        _provide_function(module_name, attribute, like, chosen))
    return patch_name


def known_kinds() -> "Dict[str, Tuple[str, Dict[str, str]]]":
    """Every ``like=``: the kinds of :data:`KINDS`, then each module the pack stands in for
    (its implementation submodule and names; its submodules left out)."""
    from . import STAND_INS, SUBMODULES
    kinds = dict(KINDS)
    for stood_in, (implementation, names) in STAND_INS.items():
        if implementation == SUBMODULES:
            continue
        exposed = {each: each for each in names if f"{stood_in}.{each}" not in STAND_INS}
        kinds.setdefault(stood_in, (implementation, exposed))
    return kinds


def _declare_top_level(module_name: str, like: "Optional[str]", functions: "Dict[str, Any]",
                       patch_name: str, enabled: bool) -> str:
    """A stand-in boundary for a top-level extension and the patch that fills it."""
    lazypatch.stand_in(module_name, attributes={MARKER: PACK}, name=patch_name,
                       tags=(PACK, TAG), enabled=enabled)

    def fill_extension(module: "Any", patch: "Any") -> None:
        if MARKER not in vars(module):
            patch.skip(f"{module_name!r} is installed: the compiled extension is used, "
                       f"untouched")
        exposed = _resolve_functions(like, functions)
        for exposed_name, value in exposed.items():
            patch.setattr(module, exposed_name, value)
        patch.setattr(module, "__all__", sorted(exposed))
        kind = f"{like} " if like else ""
        patch.note(f"pure-PyTorch {kind}stand-in ({', '.join(sorted(exposed))}): not "
                   f"installed")
    fill_extension.__doc__ = f"Fill the stand-in of {module_name} with pure-PyTorch functions"
    fill_extension.__qualname__ = f"fill_{module_name}"
    lazypatch.when_imported(module_name, name=f"{patch_name}.pytorch", tags=(PACK, TAG),
                            enabled=enabled)(fill_extension)
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


def implementation_module(name: str) -> "Any":
    """The module implementing a stand-in: ``name`` is relative to this pack, a bare name
    its own submodule (``"bev_pool"``), ``"..shared.x"`` a kernel the packs share."""
    from importlib import import_module
    return import_module(name if name.startswith(".") else f".{name}", __package__)


def _resolve_functions(like: "Optional[str]", functions: "Dict[str, Any]") -> "Dict[str, Any]":
    from importlib import import_module
    resolved: "Dict[str, Any]" = {}
    if like is not None:
        implementation, names = known_kinds()[like]
        source = implementation_module(implementation)
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
    """Declare :data:`PROJECT_EXTENSIONS`, and the registry clash of the mmdetection3d 0.17
    forks they serve (fork_registrations), off until the pack is enabled."""
    from .fork_registrations import declare_fork_registrations
    for module_name, kind in PROJECT_EXTENSIONS.items():
        declare_extension(module_name, like=kind, enabled=False)
    declare_fork_registrations()
