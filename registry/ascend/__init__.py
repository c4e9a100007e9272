"""Ascend pack: DrivingSDK's default one-click patch set, lazily and undoably.

The same optimizations as ``mx_driving.patcher.default_patcher_builder``
(seed 002), each a separately named patch tagged ``ascend``, applied when its
target is imported instead of importing every target at ``build()``:

==============================  ============================================  =========
patch                           target                                        default
==============================  ============================================  =========
``ascend.resnet_add_relu``      mmdet ResNet ``BasicBlock``/``Bottleneck``    on
                                ``.forward``: residual add + ReLU fused
                                (``mx_driving.npu_add_relu``)
``ascend.resnet_maxpool``       mmdet ``ResNet.forward``: stem max-pool by    on
                                ``mx_driving.npu_max_pool2d`` (inference)
``ascend.resnet_fp16``          mmdet ``ResNet.forward`` under FP16 autocast  off
                                (conflicts with ``resnet_maxpool``: same slot)
``ascend.tensor_bool_index``    ``torch.Tensor.__getitem__``: 1-D/2-D bool    on
                                masks as ``torch.masked_select``
``ascend.batch_matmul``         ``torch.matmul``, ``Tensor.matmul``/``@``:    on
                                ``mx_driving.npu_batch_matmul`` where shapes
                                allow
``ascend.optim_wrapper_clip``   mmengine ``OptimWrapper``: norm clipping by   on
                                the optimizer's ``clip_grad_norm_fused_``
``ascend.sparse_conv``          ``mmcv.ops`` sparse conv classes and their    on
                                registry entries from ``mx_driving``
``ascend.mmcv1_optimizer_hook`` mmcv 1.x ``OptimizerHook`` family: fused      on
                                clipping (never fires on mmcv 2.x)
``ascend.mmcv1_scatter_stream`` mmcv 1.x ``Scatter.forward`` stream fix       on
                                (never fires on mmcv 2.x)
``ascend.mmcv1_ddp``            mmcv 1.x ``MMDistributedDataParallel`` ->    on
                                ``NPUDistributedDataParallel`` (mmcv 1.x)
``ascend.mmcv1_fp16_scaler``    mmcv 1.x ``Fp16OptimizerHook`` and            on
                                ``GradientCumulativeFp16OptimizerHook``:
                                torch_npu's ``GradScaler`` (mmcv 1.x)
``ascend.pseudo_sampler``       mmdet ``PseudoSampler.sample`` without the    on
                                redundant ``unique`` (a host sort)
``ascend.nuscenes_metric``      mmdet3d nuScenes ``output_to_nusc_box``:      on
                                boxes read once, rotations in closed form
==============================  ============================================  =========

Every patch requires the ``torch_npu`` and ``mx_driving`` distributions
(checked in installed metadata, nothing imported); without them each reports
``skipped``. Names follow DrivingSDK's where they match (``pseudo_sampler``,
``nuscenes_metric``), so its ``disable_patches(...)`` names turn them off too.
Multi-scale deformable attention, deformable convolution and
voxelization are the OpenMMLab pack's (``openmmlab.mx_driving.*``).

This file only declares: implementations import torch/mmcv when their target
is imported. Kernels are looked up in ``mx_driving`` at first use, so that a
patch on ``torch`` never imports ``mx_driving`` while ``mx_driving`` (which
imports torch) may itself be half-imported.
"""

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "ascend"
TAGS = (PACK,)
OPT_IN = False
TARGETS = ("torch", "mmcv", "mmdet", "mmdet3d", "mmengine")
REQUIRES = ("torch_npu", "mx_driving")

import lazypatch

ASCEND = list(REQUIRES)
# mmcv 1.x-only targets: these modules do not exist in mmcv 2.x, so the
# patches simply stay pending there; the requirement makes a stray import
# report why nothing happened.
ASCEND_MMCV1 = ASCEND + ["mmcv<2.0.0"]
RESNET = "mmdet.models.backbones.resnet"
PSEUDO_SAMPLER = "mmdet.models.task_modules.samplers.pseudo_sampler"
PSEUDO_SAMPLER_MMDET2 = "mmdet.core.bbox.samplers.pseudo_sampler"
NUSCENES_METRIC = "mmdet3d.evaluation.metrics.nuscenes_metric"


@lazypatch.when_imported(RESNET, name=f"{PACK}.resnet_add_relu", requires=ASCEND,
                         tags=(PACK, "mmdet", "resnet"))
def resnet_add_relu(resnet, patch):
    """ResNet BasicBlock/Bottleneck: residual add and ReLU as one mx_driving.npu_add_relu."""
    from .resnet import patch_add_relu
    patch_add_relu(resnet, patch)


@lazypatch.when_imported(RESNET, name=f"{PACK}.resnet_maxpool", requires=ASCEND,
                         tags=(PACK, "mmdet", "resnet"))
def resnet_maxpool(resnet, patch):
    """ResNet stem max-pool by mx_driving.npu_max_pool2d when no gradient is needed."""
    from .resnet import patch_max_pool
    patch_max_pool(resnet, patch)


@lazypatch.when_imported(RESNET, name=f"{PACK}.resnet_fp16", requires=ASCEND, priority=10,
                         tags=(PACK, "mmdet", "resnet", "fp16", "optional"), enabled=False)
def resnet_fp16(resnet, patch):
    """ResNet backbone under FP16 autocast (off by default; replaces ascend.resnet_maxpool)."""
    from .resnet import patch_fp16
    patch_fp16(resnet, patch)


@lazypatch.when_imported("torch", name=f"{PACK}.tensor_bool_index", requires=ASCEND,
                         tags=(PACK, "torch"))
def tensor_bool_index(torch, patch):
    """Tensor[bool mask] on 1-D/2-D tensors as torch.masked_select; other indexing unchanged."""
    from .tensor_ops import patch_bool_index
    patch_bool_index(torch, patch)


@lazypatch.when_imported("torch", name=f"{PACK}.batch_matmul", requires=ASCEND,
                         tags=(PACK, "torch"))
def batch_matmul(torch, patch):
    """torch.matmul / Tensor.matmul / @ by mx_driving.npu_batch_matmul where shapes allow."""
    from .tensor_ops import patch_batch_matmul
    patch_batch_matmul(torch, patch)


@lazypatch.when_imported("mmengine.optim.optimizer.optimizer_wrapper",
                         name=f"{PACK}.optim_wrapper_clip", requires=ASCEND,
                         tags=(PACK, "mmengine", "optim"))
def optim_wrapper_clip(optimizer_wrapper, patch):
    """mmengine OptimWrapper: norm clipping by the optimizer's fused clip_grad_norm_fused_."""
    from .optim import patch_optim_wrapper
    patch_optim_wrapper(optimizer_wrapper, patch)


@lazypatch.when_imported("mmcv.ops", name=f"{PACK}.sparse_conv", requires=ASCEND,
                         tags=(PACK, "mmcv", "ops", "spconv"))
def sparse_conv(mmcv_ops, patch):
    """mmcv.ops sparse convolution classes (and registry entries) from mx_driving."""
    from .spconv import patch_sparse_conv
    patch_sparse_conv(mmcv_ops, patch)


@lazypatch.when_imported("mmcv.runner.hooks.optimizer", name=f"{PACK}.mmcv1_optimizer_hook",
                         requires=ASCEND_MMCV1, tags=(PACK, "mmcv", "mmcv1", "optim"))
def mmcv1_optimizer_hook(optimizer_hooks, patch):
    """mmcv 1.x OptimizerHook family: fused gradient clipping (mmcv.runner is gone in mmcv 2)."""
    from .optim import patch_mmcv1_optimizer_hooks
    patch_mmcv1_optimizer_hooks(optimizer_hooks, patch)


@lazypatch.when_imported("mmcv.parallel._functions", name=f"{PACK}.mmcv1_scatter_stream",
                         requires=ASCEND_MMCV1, tags=(PACK, "mmcv", "mmcv1", "parallel"))
def mmcv1_scatter_stream(functions, patch):
    """mmcv 1.x Scatter.forward: copy streams on the NPU (mmcv.parallel is gone in mmcv 2)."""
    from .mmcv1 import patch_scatter_stream
    patch_scatter_stream(functions, patch)


@lazypatch.when_imported("mmcv.parallel", name=f"{PACK}.mmcv1_ddp", requires=ASCEND_MMCV1,
                         tags=(PACK, "mmcv", "mmcv1", "parallel"))
def mmcv1_ddp(parallel, patch):
    """mmcv 1.x MMDistributedDataParallel -> NPUDistributedDataParallel (mmcv 1.x only)."""
    from .mmcv1 import patch_distributed_data_parallel
    patch_distributed_data_parallel(parallel, patch)


@lazypatch.when_imported("mmcv.runner.hooks.optimizer", name=f"{PACK}.mmcv1_fp16_scaler",
                         requires=ASCEND_MMCV1, tags=(PACK, "mmcv", "mmcv1", "optim", "fp16"))
def mmcv1_fp16_scaler(optimizer_hooks, patch):
    """mmcv 1.x FP16 optimizer hooks (plain and gradient-cumulative): torch_npu's GradScaler
    instead of CUDA's, which disables itself without CUDA (mmcv.runner is gone in mmcv 2)."""
    from .mmcv1 import patch_fp16_grad_scaler
    patch_fp16_grad_scaler(optimizer_hooks, patch)


@lazypatch.when_imported(PSEUDO_SAMPLER, name=f"{PACK}.pseudo_sampler", requires=ASCEND,
                         tags=(PACK, "mmdet", "sampler"))
def pseudo_sampler(pseudo_sampler_module, patch):
    """mmdet PseudoSampler.sample without Tensor.unique (nonzero's indices are already unique)."""
    from .samplers import patch_pseudo_sampler
    patch_pseudo_sampler(pseudo_sampler_module, patch)


@lazypatch.when_imported(PSEUDO_SAMPLER_MMDET2, name=f"{PACK}.pseudo_sampler_mmdet2",
                         requires=ASCEND, tags=(PACK, "mmdet", "sampler"))
def pseudo_sampler_mmdet2(pseudo_sampler_module, patch):
    """mmdet 2.x PseudoSampler.sample without Tensor.unique (the same change, mmdet 2.x's path)."""
    from .samplers import patch_pseudo_sampler
    patch_pseudo_sampler(pseudo_sampler_module, patch)


@lazypatch.when_imported(NUSCENES_METRIC, name=f"{PACK}.nuscenes_metric", requires=ASCEND,
                         tags=(PACK, "mmdet3d", "nuscenes"))
def nuscenes_metric(metric_module, patch):
    """mmdet3d nuScenes output_to_nusc_box: boxes read once, rotations in closed form."""
    from .nuscenes import patch_output_to_nusc_box
    patch_output_to_nusc_box(metric_module, patch)
