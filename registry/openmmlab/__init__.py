"""OpenMMLab pack: mmdet / mmdet3d on mmcv-lite 2.2 (or mmcv 1.x without ops) and NumPy 2.

Seven concerns, each a separately named patch (``LAZYPATCH_DISABLE`` takes
the names, the family prefix ``openmmlab.mx_driving`` or the tag ``openmmlab``):

* ``openmmlab.mmcv_version_gate.<package>`` (mmdet, mmdet3d, mmseg, mmocr,
  ...): these packages assert a range of ``mmcv.__version__`` at import
  (mmdet 3.3, mmdet3d 1.4 and mmseg 1.2: ``< 2.2.0``; mmdet 2.24: ``<= 1.6.0``;
  mmdet3d 1.0.0rc4: ``<= 1.7.0``), mmdet3d also of ``mmdet`` and ``mmseg``.
  The ranges are read from the package's own ``__init__`` source; while (and
  only while) its body runs, each asserted ``__version__`` reads the accepted
  version nearest to the installed one; the true one is back as soon as the
  body finished. Only when the installed version is of the same major (the same
  API generation) as the bound it crosses.
* ``openmmlab.mmcv_ext``: mmcv-lite has no compiled ``mmcv._ext``, so
  ``import mmcv.ops`` fails. Just before ``mmcv.ops`` executes, provide a
  pure-PyTorch ``mmcv._ext`` (:mod:`..shared.mmcv_ext`) unless a compiled one exists;
  ``openmmlab.mmcv_ext.before_mmcv_ops`` provides it from ``import mmcv`` on,
  for code that calls ``load_ext('_ext', ...)`` before ``mmcv.ops``.
* ``openmmlab.mmengine_checkpoint_load``: torch >= 2.6 loads with
  ``weights_only=True`` by default, which refuses the message hub mmengine
  0.10 saves in every checkpoint, so ``Runner(resume=True)`` fails; mmengine's
  local loader stays weights-only and allows, during the load only, exactly
  the types mmengine's own checkpoints hold (:mod:`.checkpoint`).
  ``openmmlab.mmengine_checkpoint_load_unsafe`` (off, tags ``unsafe`` and
  ``explicit``: only its exact name enables it, never ``*``, a glob or the
  family ``openmmlab``) makes that loader unpickle fully, for trusted
  checkpoints only.
* ``openmmlab.points_in_boxes_cpu``: mmcv's ``points_in_boxes_part`` /
  ``_all`` call ``torch.cuda.current_device()`` before their kernel, which
  fails on CPU; CPU tensors are answered by mmcv's CPU kernel instead.
* ``openmmlab.mmdet_focal_loss_cpu``: mmdet's ``FocalLoss`` takes mmcv's kernel
  only for CUDA tensors; its CPU branch's ``F.one_hot`` refuses the -1 labels
  the kernel treats as background. The installed ``forward`` is edited so that
  the CPU branch computes what the kernel computes (:mod:`.focal_loss`).
* ``openmmlab.moved_modules.numba``: numba moved ``numba.errors`` to
  ``numba.core.errors`` and dropped the old name, which mmdetection3d 0.17 still
  imports; the old name is served as the module at the new place, only where the
  installed numba lacks it (:mod:`.moved_modules`).
* ``openmmlab.mx_driving.msda`` / ``.deform_conv`` / ``.voxelization``: on an
  Ascend host (``torch_npu`` and ``mx_driving`` importable), route mmcv's
  multi-scale deformable attention, deformable convolutions and voxelization
  to mx_driving's NPU kernels, as DrivingSDK's patcher does.

This file only declares; the implementations import mmcv/torch when their
target is imported.
"""

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "openmmlab"
TAGS = (PACK,)
OPT_IN = False
TARGETS = ("mmcv", "mmengine", "mmdet", "mmdet3d", "mmseg", "mmocr", "mmaction", "mmagic",
           "mmyolo", "mmrotate", "numba")
REQUIRES = ()

import lazypatch

#: Packages of the family whose ``__init__`` asserts an mmcv range that ends before
#: 2.2 (mmdet 3.x, mmdet3d 1.x, mmseg 1.x, mmocr 1.x, mmaction2 1.x, mmagic 1.x,
#: mmyolo, mmrotate 1.x) or before 1.7.2 (their 1.x-stack releases: mmdet 2.x,
#: mmdet3d 0.17-1.0.0rcN, mmseg 0.x); each gets its own gate, which reads the
#: ranges from that package's source when it imports. mmpretrain 1.2 (<2.4.0) and mmpose 1.3
#: (<=3.0.0) accept mmcv 2.2 as they are: no gate, as every registration costs
#: activation time.
VERSION_GATED = ("mmdet", "mmdet3d", "mmseg", "mmocr", "mmaction", "mmagic", "mmyolo",
                 "mmrotate")


def mmcv_version_gate(package, patch):
    """While the package's __init__ runs, present mmcv/mmdet/mmseg versions inside the
    ranges that __init__ asserts (read from its source; same major versions only)."""
    from .version_gate import present_for_package
    present_for_package(package, patch)


for _package in VERSION_GATED:
    # requires the package itself (by import name): a gate for a package that is
    # not installed is reported as not applicable here, not as pending forever.
    lazypatch.before_import(_package, name=f"{PACK}.mmcv_version_gate.{_package}",
                            requires=[_package],
                            tags=(PACK, "compat", "mmcv"))(mmcv_version_gate)


@lazypatch.before_import("mmcv.ops", name=f"{PACK}.mmcv_ext", tags=(PACK, "ops", "mmcv"))
def mmcv_ext(mmcv_ops, patch):
    """Provide a pure-PyTorch mmcv._ext when mmcv has no compiled one (mmcv-lite)."""
    from .ext_provision import provide_pure_pytorch_ext
    provide_pure_pytorch_ext(patch)


# A member of the openmmlab.mmcv_ext family, so disabling that name disables both.
@lazypatch.when_imported("mmcv", name=f"{PACK}.mmcv_ext.before_mmcv_ops",
                         tags=(PACK, "ops", "mmcv"))
def mmcv_ext_before_mmcv_ops(mmcv, patch):
    """The same mmcv._ext for load_ext('_ext', ...) / import mmcv._ext before mmcv.ops."""
    from .ext_provision import provide_ext_before_mmcv_ops
    provide_ext_before_mmcv_ops(patch)


@lazypatch.when_imported("mmengine.runner.checkpoint", name=f"{PACK}.mmengine_checkpoint_load",
                         requires=["mmengine>=0.10,<0.11", "torch>=2.6"],
                         tags=(PACK, "compat", "mmengine"))
def mmengine_checkpoint_load(checkpoint, patch):
    """Let mmengine 0.10 resume its own checkpoints under torch >= 2.6, still weights-only."""
    from .checkpoint import load_local_checkpoints_weights_only
    load_local_checkpoints_weights_only(checkpoint, patch)


# Off, and tagged "explicit": only its exact name selects it (not "*", a glob, the
# family "openmmlab" or a tag), because a full unpickle runs any code a checkpoint names.
@lazypatch.when_imported("mmengine.runner.checkpoint",
                         name=f"{PACK}.mmengine_checkpoint_load_unsafe",
                         requires=["mmengine>=0.10,<0.11", "torch>=2.6"],
                         tags=(PACK, "unsafe", "explicit"), enabled=False)
def mmengine_checkpoint_load_unsafe(checkpoint, patch):
    """Trusted checkpoints only: mmengine's local loader unpickles fully (weights_only=False)."""
    from .checkpoint import allow_full_unpickling
    allow_full_unpickling(checkpoint, patch)


@lazypatch.when_imported("mmcv.ops.points_in_boxes", name=f"{PACK}.points_in_boxes_cpu",
                         tags=(PACK, "ops", "mmcv"))
def points_in_boxes_cpu(points_in_boxes, patch):
    """points_in_boxes_part/_all on CPU tensors use mmcv's CPU kernel (they call CUDA first)."""
    from .points_in_boxes import serve_cpu_tensors
    serve_cpu_tensors(points_in_boxes, patch)


@lazypatch.when_imported("mmdet.models.losses.focal_loss", name=f"{PACK}.mmdet_focal_loss_cpu",
                         tags=(PACK, "mmdet", "compat"))
def mmdet_focal_loss_cpu(focal_loss, patch):
    """FocalLoss on non-CUDA tensors: labels outside [0, C) are background, as in mmcv's kernel."""
    from .focal_loss import align_cpu_branch
    align_cpu_branch(focal_loss, patch)


@lazypatch.when_imported("numba", name=f"{PACK}.moved_modules.numba", tags=(PACK, "compat", "numba"))
def numba_moved_modules(numba, patch):
    """numba.errors (mmdetection3d 0.17 imports it) is numba.core.errors where numba dropped the old name."""
    from .moved_modules import provide_moved_modules
    provide_moved_modules(numba, patch)


_NPU_TAGS = (PACK, "ops", "mmcv", "npu")


@lazypatch.when_imported("mmcv.ops", name=f"{PACK}.mx_driving.msda", tags=_NPU_TAGS)
def mx_driving_msda(mmcv_ops, patch):
    """On Ascend, run MultiScaleDeformableAttnFunction with mx_driving's kernel."""
    from .npu_kernels import use_mx_driving_msda
    use_mx_driving_msda(mmcv_ops, patch)


@lazypatch.when_imported("mmcv.ops", name=f"{PACK}.mx_driving.deform_conv", tags=_NPU_TAGS)
def mx_driving_deform_conv(mmcv_ops, patch):
    """On Ascend, run DeformConv2d and ModulatedDeformConv2d with mx_driving's kernels."""
    from .npu_kernels import use_mx_driving_deform_conv
    use_mx_driving_deform_conv(mmcv_ops, patch)


@lazypatch.when_imported("mmcv.ops", name=f"{PACK}.mx_driving.voxelization", tags=_NPU_TAGS)
def mx_driving_voxelization(mmcv_ops, patch):
    """On Ascend, run mmcv's voxelization with mx_driving's kernel."""
    from .npu_kernels import use_mx_driving_voxelization
    use_mx_driving_voxelization(mmcv_ops, patch)
