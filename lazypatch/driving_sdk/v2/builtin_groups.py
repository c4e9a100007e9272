"""DrivingSDK 2.0's built-in ``Patch`` classes, shaped as DrivingSDK shapes them.

Each class's ``patches()`` returns DrivingSDK's list (the same targets, kinds and
counts: ``MultiScaleDeformableAttention.patches()`` is two ``AtomicPatch`` on
``MultiScaleDeformableAttnFunction.forward``/``backward`` with a
``replacement_wrapper``, ``OptimizerHooks.patches()`` four ``RegistryPatch`` on
mmcv 1.x's ``HOOKS``...), so code that reads or filters them keeps working. What
declaring one does is lazypatch's: where a built-in pack patch does the work
(``pack_patches``), declaring the DrivingSDK patch turns that pack patch on
(applied when its module is imported, version-checked, undone exactly); where
none does (``nuscenes_dataset``, ``torch_scatter``), the patch is a plain
``AtomicPatch`` with a replacement written here.

The helper methods DrivingSDK's classes carry (``TensorIndex._replacement``,
``BatchMatmul._check_shape_bmm``, ``Stream.scatter_forward``...) are callable and
do that work: they hand over to the pack's implementation where there is one,
imported when first called (declaring a class imports nothing).
"""

from __future__ import annotations

from .helpers import nuscenes_kit_available
from .patches import AtomicPatch, BasePatch, LegacyPatch, Patch, RegistryPatch
from .versions import mmcv_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple


def enable_pack_patches(names: "Iterable[str]") -> "List[str]":
    """Load the built-in packs if needed and enable these pack patches (an opt-in
    pack's patch loads its pack); their names."""
    from ...apply import application
    from ...registry import load_packs
    from ...state import STATE
    chosen = list(names)
    if any(name not in STATE.catalog.by_name for name in chosen):
        load_packs()
    missing = [name for name in chosen if name not in STATE.catalog.by_name]
    if missing:
        from ...decide.selection import load_opt_in_packs
        load_opt_in_packs(tuple(missing))
    application.enable(tuple(chosen))
    return chosen


class PackBacked:
    """A DrivingSDK built-in patch whose work lazypatch's pack patches do: declaring it
    enables them (``pack_patches``); with none, it is declared as its base class is."""

    pack_patches: "Tuple[str, ...]" = ()

    def leave_out(self, names: "Set[str]") -> bool:
        if not self.pack_patches:
            return True
        self.pack_patches = tuple(name for name in self.pack_patches if name not in names
                                  and name.rsplit(".", 1)[-1] not in names)
        return bool(self.pack_patches)

    def declare_all(self, patch_name: str,
                    guard: "Optional[Callable[[], None]]" = None) -> "List[str]":
        if not self.pack_patches:
            return super().declare_all(patch_name, guard)   # type: ignore[misc]
        from ...state import STATE
        self.kept_on = tuple(name for name in self.pack_patches
                             if getattr(STATE.catalog.by_name.get(name), "enabled", False))
        return enable_pack_patches(self.pack_patches)


class BuiltinAtomicPatch(PackBacked, AtomicPatch):
    """DrivingSDK's ``AtomicPatch`` of a built-in group (see ``PackBacked``);
    ``bound_replacement(root, original)`` makes the replacement ``apply_to(root)`` sets
    where it must use the given module's own functions or the value it replaces."""

    def __init__(self, target: str, replacement: "Any" = None, *,
                 pack_patches: "Tuple[str, ...]" = (),
                 bound_replacement: "Optional[Callable[[Any, Any], Any]]" = None,
                 **options: "Any") -> None:
        super().__init__(target, replacement, **options)
        self.pack_patches = tuple(pack_patches)
        self.bound_replacement = bound_replacement

    def replacement_for(self, root: "Any", original: "Any") -> "Any":
        if self.bound_replacement is not None:
            return self.bound_replacement(root, original)
        return super().replacement_for(root, original)


class BuiltinRegistryPatch(PackBacked, RegistryPatch):
    """DrivingSDK's ``RegistryPatch`` of a built-in group (see ``PackBacked``);
    ``bound_class(root)`` makes the class ``apply_to(root)`` registers where it must be
    built from the given module's own names."""

    def __init__(self, registry: str, module_cls: "Any" = None, *,
                 pack_patches: "Tuple[str, ...]" = (),
                 bound_class: "Optional[Callable[[Any], Any]]" = None,
                 **options: "Any") -> None:
        super().__init__(registry, module_cls, **options)
        self.pack_patches = tuple(pack_patches)
        self.bound_class = bound_class

    def class_for(self, root: "Any") -> "Any":
        if self.bound_class is not None:
            return self.bound_class(root)
        return super().class_for(root)


class BuiltinLegacyPatch(PackBacked, LegacyPatch):
    """DrivingSDK's ``LegacyPatch`` of a built-in group (see ``PackBacked``)."""

    def __init__(self, func: "Callable[..., Any]", options: "Optional[Dict[str, Any]]" = None,
                 target_module: "Optional[str]" = None, *,
                 pack_patches: "Tuple[str, ...]" = ()) -> None:
        super().__init__(func, options, target_module)
        self.pack_patches = tuple(pack_patches)


def pack_function(module: str, attribute: str, doc: str) -> "Callable[..., Any]":
    """A function calling ``lazypatch.registry.<module>.<attribute>``, imported at the
    first call (the pack modules import torch, mmcv...: declaring imports nothing)."""
    def call(*args: "Any", **kwargs: "Any") -> "Any":
        from importlib import import_module
        return getattr(import_module(f"lazypatch.registry.{module}"), attribute)(*args, **kwargs)
    call.__name__ = call.__qualname__ = attribute
    call.__doc__ = doc
    return call


def mx_driving_function(name: str) -> "Any":
    """``mx_driving.<name>`` of the installed DrivingSDK operators (ImportError without)."""
    from importlib import import_module
    return getattr(import_module("mx_driving"), name)


# -- mmcv ---------------------------------------------------------------------------

class MultiScaleDeformableAttention(Patch):
    """mmcv's ``MultiScaleDeformableAttnFunction`` by mx_driving's kernel
    (lazypatch: ``openmmlab.mx_driving.msda``)."""

    name = "multi_scale_deformable_attention"
    legacy_name = "msda"
    target_module = "mmcv"

    @staticmethod
    def _forward_wrapper(npu_forward: "Callable[..., Any]") -> "Callable[..., Any]":
        """mx_driving's forward takes no ``im2col_step``: accept and drop it."""
        def forward(ctx: "Any", value: "Any", spatial_shapes: "Any", level_start_index: "Any",
                    sampling_locations: "Any", attention_weights: "Any",
                    im2col_step: "Any" = None) -> "Any":
            return npu_forward(ctx, value, spatial_shapes, level_start_index,
                               sampling_locations, attention_weights)
        return forward

    @staticmethod
    def _backward_wrapper(npu_backward: "Callable[..., Any]") -> "Callable[..., Any]":
        """mmcv's backward returns one more gradient (``im2col_step``'s, None)."""
        def backward(ctx: "Any", grad_output: "Any") -> "Any":
            return (*npu_backward(ctx, grad_output), None)
        return backward

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        base = "mmcv.ops.multi_scale_deform_attn.MultiScaleDeformableAttnFunction"
        pack = ("openmmlab.mx_driving.msda",)
        return [BuiltinAtomicPatch(f"{base}.forward",
                                   "mx_driving.MultiScaleDeformableAttnFunction.forward",
                                   replacement_wrapper=cls._forward_wrapper, pack_patches=pack),
                BuiltinAtomicPatch(f"{base}.backward",
                                   "mx_driving.MultiScaleDeformableAttnFunction.backward",
                                   replacement_wrapper=cls._backward_wrapper, pack_patches=pack)]


def _kernel_pair(module: str, function_class: str, function: str,
                 pack: str) -> "List[BasePatch]":
    return [BuiltinAtomicPatch(f"mmcv.ops.{module}.{function_class}",
                               f"mx_driving.{function_class}", pack_patches=(pack,)),
            BuiltinAtomicPatch(f"mmcv.ops.{module}.{function}", f"mx_driving.{function}",
                               pack_patches=(pack,))]


class DeformConv(Patch):
    """mmcv's deformable convolution by mx_driving's
    (lazypatch: ``openmmlab.mx_driving.deform_conv``)."""

    name = "deform_conv"
    legacy_name = "dc"
    target_module = "mmcv"

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return _kernel_pair("deform_conv", "DeformConv2dFunction", "deform_conv2d",
                            "openmmlab.mx_driving.deform_conv")


class ModulatedDeformConv(Patch):
    """mmcv's modulated deformable convolution by mx_driving's (lazypatch:
    ``openmmlab.mx_driving.deform_conv``, which covers both convolutions)."""

    name = "modulated_deform_conv"
    legacy_name = "mdc"
    target_module = "mmcv"

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return _kernel_pair("modulated_deform_conv", "ModulatedDeformConv2dFunction",
                            "modulated_deform_conv2d", "openmmlab.mx_driving.deform_conv")


SPARSE_CLASSES = (("SparseConvTensor", "sparse_structure"), ("SparseSequential", "sparse_modules"),
                  ("SparseModule", "sparse_modules"), ("SparseConvolution", "sparse_conv"),
                  ("SubMConv3d", "sparse_conv"), ("SparseConv3d", "sparse_conv"),
                  ("SparseInverseConv3d", "sparse_conv"))
SPARSE_REGISTERED = ("SubMConv3d", "SparseConv3d", "SparseInverseConv3d")


class SparseConv3D(Patch):
    """mmcv.ops' sparse convolution classes (and their registry entries: mmcv 1.x's
    ``CONV_LAYERS``, mmengine's ``MODELS``) by mx_driving's
    (lazypatch: ``ascend.sparse_conv``)."""

    name = "spconv3d"
    legacy_name = "spconv3d"
    target_module = "mmcv"

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        pack = ("ascend.sparse_conv",)
        patches: "List[BasePatch]" = []
        for class_name, module in SPARSE_CLASSES:
            for target in (f"mmcv.ops.{class_name}", f"mmcv.ops.{module}.{class_name}"):
                patches.append(BuiltinAtomicPatch(target, f"mx_driving.{class_name}",
                                                  pack_patches=pack))
        registries = (["mmcv.cnn.CONV_LAYERS"] if mmcv_version.is_v1x else []) + \
            (["mmengine.registry.MODELS"] if mmcv_version.is_v2x else [])
        for registry in registries:
            patches.extend(BuiltinAtomicPatch(f"{registry}._module_dict.{class_name}",
                                              f"mx_driving.{class_name}", pack_patches=pack)
                           for class_name in SPARSE_REGISTERED)
        return patches


class Voxelization(Patch):
    """mmcv's voxelization by mx_driving's kernel
    (lazypatch: ``openmmlab.mx_driving.voxelization``)."""

    name = "voxelization"
    legacy_name = "voxelization"
    target_module = "mmcv"

    @staticmethod
    def _voxelization(ctx: "Any", points: "Any", voxel_size: "Any", coors_range: "Any",
                      max_points: int = 35, max_voxels: int = 20000,
                      deterministic: bool = True) -> "Any":
        """``_Voxelization.forward`` by ``mx_driving.voxelization``, which takes mmcv's
        arguments (hard voxelization with limits, dynamic with -1)."""
        return mx_driving_function("voxelization")(points, voxel_size, coors_range,
                                                   max_points, max_voxels, deterministic)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch("mmcv.ops.voxelize._Voxelization.forward", cls._voxelization,
                                   pack_patches=("openmmlab.mx_driving.voxelization",))]


def _mmcv1() -> bool:
    return bool(mmcv_version.is_v1x)


class Mmcv1Group(Patch):
    """A group of patches on mmcv 1.x only (``precheck``: mmcv 1.x is installed)."""

    target_module = "mmcv"
    precheck = staticmethod(_mmcv1)


class Stream(Mmcv1Group):
    """mmcv 1.x ``Scatter.forward`` with streams made for the NPU
    (lazypatch: ``ascend.mmcv1_scatter_stream``)."""

    name = "stream"
    legacy_name = "stream"

    @staticmethod
    def scatter_forward(target_gpus: "Any", input_: "Any") -> "Tuple[Any, ...]":
        """mmcv 1.x ``Scatter.forward`` with its streams created for the accelerator in use
        (int device indices, as mmcv passes them, made devices)."""
        import mmcv.parallel._functions as functions
        return scatter_with_streams(functions, target_gpus, input_)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        import functools
        return [BuiltinAtomicPatch(
            "mmcv.parallel._functions.Scatter.forward", staticmethod(cls.scatter_forward),
            precheck=cls.precheck, pack_patches=("ascend.mmcv1_scatter_stream",),
            bound_replacement=lambda mmcv, _forward: staticmethod(functools.partial(
                scatter_with_streams, mmcv.parallel._functions)))]


def scatter_with_streams(functions: "Any", target_gpus: "Any", input_: "Any") -> "Tuple[Any, ...]":
    """mmcv 1.x ``Scatter.forward`` on the helpers of ``functions`` (its
    ``mmcv.parallel._functions``), streams made for ``torch.device(<accelerator>, i)``."""
    import torch
    streams = None
    if functions.get_input_device(input_) == -1 and target_gpus != [-1]:
        device = "npu" if hasattr(torch, "npu") else "cuda"
        streams = [functions._get_stream(torch.device(device, index)) for index in target_gpus]
    outputs = functions.scatter(input_, target_gpus, streams)
    if streams is not None:
        functions.synchronize_stream(outputs, target_gpus, streams)
    return tuple(outputs) if isinstance(outputs, list) else (outputs,)


class DDP(Mmcv1Group):
    """mmcv 1.x ``MMDistributedDataParallel`` as mmcv's NPU one
    (lazypatch: ``ascend.mmcv1_ddp``)."""

    name = "ddp"
    legacy_name = "ddp"

    @staticmethod
    def ddp_forward(self: "Any", *inputs: "Any", **kwargs: "Any") -> "Any":
        """``_run_ddp_forward`` without torch's DDP hooks: inputs moved to the first
        device (when there are device ids), then the wrapped module."""
        if self.device_ids:
            moved_inputs, moved_kwargs = self.to_kwargs(inputs, kwargs, self.device_ids[0])
            return self.module(*moved_inputs[0], **moved_kwargs[0])
        return self.module(*inputs, **kwargs)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        base = "mmcv.parallel.distributed.MMDistributedDataParallel"
        pack = ("ascend.mmcv1_ddp",)
        return [BuiltinAtomicPatch(f"{base}._run_ddp_forward", cls.ddp_forward,
                                   precheck=cls.precheck, pack_patches=pack),
                BuiltinAtomicPatch(base, "mmcv.device.npu.NPUDistributedDataParallel",
                                   precheck=cls.precheck, pack_patches=pack)]


OPTIMIZER_HOOKS = ("OptimizerHook", "GradientCumulativeOptimizerHook", "Fp16OptimizerHook",
                   "GradientCumulativeFp16OptimizerHook")


def _registered_hook(name: str) -> "Callable[[], Any]":
    def factory() -> "Any":
        """mmcv 1.x's hook class of this name, as lazypatch's packs leave it (fused
        clipping, torch_npu's GradScaler)."""
        from importlib import import_module
        return getattr(import_module("mmcv.runner.hooks.optimizer"), name)
    factory.__name__ = factory.__qualname__ = f"registered_{name}"
    return factory


class OptimizerHooks(Patch):
    """mmcv 1.x's optimizer hooks with fused gradient clipping and NPU loss scaling
    (lazypatch: ``ascend.mmcv1_optimizer_hook``, ``ascend.mmcv1_fp16_scaler``)."""

    name = "optimizer_hooks"
    legacy_name = "optimizer_hooks"
    target_module = "mmcv"

    _create_optimizer_hook = staticmethod(_registered_hook("OptimizerHook"))
    _create_gradient_cumulative_optimizer_hook = staticmethod(
        _registered_hook("GradientCumulativeOptimizerHook"))
    _create_fp16_optimizer_hook = staticmethod(_registered_hook("Fp16OptimizerHook"))
    _create_gradient_cumulative_fp16_optimizer_hook = staticmethod(
        _registered_hook("GradientCumulativeFp16OptimizerHook"))

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        factories = (cls._create_optimizer_hook, cls._create_gradient_cumulative_optimizer_hook,
                     cls._create_fp16_optimizer_hook,
                     cls._create_gradient_cumulative_fp16_optimizer_hook)
        packs = (("ascend.mmcv1_optimizer_hook",), ("ascend.mmcv1_optimizer_hook",),
                 ("ascend.mmcv1_fp16_scaler",), ("ascend.mmcv1_fp16_scaler",))
        return [BuiltinRegistryPatch("mmcv.runner.hooks.optimizer.HOOKS", name=name,
                                     module_factory=factory, precheck=_mmcv1, pack_patches=pack,
                                     bound_class=_hook_of_given_module(name))
                for name, factory, pack in zip(OPTIMIZER_HOOKS, factories, packs)]


def _hook_of_given_module(name: str) -> "Callable[[Any], Any]":
    """For a given ``mmcv`` that is not the imported one (DrivingSDK 1.0's way): the hook
    class ``name`` built on its ``runner.hooks.optimizer`` (``v1.hooks``)."""
    def hook_class(mmcv: "Any") -> "Any":
        from ..v1.hooks import optimizer_hook_of
        return optimizer_hook_of(mmcv.runner.hooks.optimizer, name)
    return hook_class


# -- mmengine -----------------------------------------------------------------------

class OptimizerWrapper(Patch):
    """mmengine ``OptimWrapper``: norm clipping by the optimizer's fused kernel
    (lazypatch: ``ascend.optim_wrapper_clip``)."""

    name = "optimizer_wrapper"
    legacy_name = "optimizer_wrapper"
    target_module = "mmengine"

    @staticmethod
    def _wrap_init(original: "Callable[..., Any]") -> "Callable[..., Any]":
        """``OptimWrapper.__init__`` calling ``original``, then routing norm clipping to
        the optimizer's ``clip_grad_norm_fused_`` where it computes the same clipping."""
        def __init__(self: "Any", *args: "Any", **kwargs: "Any") -> None:
            from importlib import import_module
            optim = import_module("lazypatch.registry.ascend.optim")
            optim.optim_wrapper_init(lambda *a, **k: original(self, *a, **k), self, args, kwargs)
        return __init__

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch(
            "mmengine.optim.optimizer.optimizer_wrapper.OptimWrapper.__init__",
            target_wrapper=cls._wrap_init, precheck=lambda: bool(mmcv_version.is_v2x),
            pack_patches=("ascend.optim_wrapper_clip",))]


# -- mmdet --------------------------------------------------------------------------

def sample_without_unique(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
    """``PseudoSampler.sample`` of ``type(self)`` as it was before lazypatch patched it,
    recompiled without ``unique`` after ``nonzero(...).squeeze(-1)`` (as it is where its
    source has none)."""
    return rebuilt_sample(_installed_sample(type(self)))(self, *args, **kwargs)


_SAMPLES_WITHOUT_UNIQUE: "Dict[Any, Any]" = {}


def sample_of(sample: "Any") -> "Callable[..., Any]":
    """A ``sample`` method running ``sample`` without ``unique`` (recompiled at the first
    call, not when it is set)."""
    def bound_sample(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        return rebuilt_sample(sample)(self, *args, **kwargs)
    bound_sample.__wrapped__ = sample   # type: ignore[attr-defined]
    bound_sample.__name__ = "sample"
    return bound_sample


def rebuilt_sample(sample: "Any") -> "Any":
    """``sample`` recompiled without ``unique`` (itself where there is none), once."""
    if sample not in _SAMPLES_WITHOUT_UNIQUE:
        from importlib import import_module
        samplers = import_module("lazypatch.registry.ascend.samplers")
        rebuilt, _ = samplers.without_unique(getattr(sample, "__wrapped__", sample))
        _SAMPLES_WITHOUT_UNIQUE[sample] = rebuilt or sample
    return _SAMPLES_WITHOUT_UNIQUE[sample]


def method_replaced(owner: type, name: str, replacement: "Any") -> "Any":
    """``owner``'s method ``name`` as it was before any lazypatch patch, ``replacement``
    skipped (a class whose method the replacement became still finds the one it
    replaced, up its MRO)."""
    from ... import original
    candidates = []
    try:
        candidates.append(original(owner, name))
    except AttributeError:
        pass
    candidates += [klass.__dict__[name] for klass in owner.__mro__ if name in klass.__dict__]
    for candidate in candidates:
        function = getattr(candidate, "__func__", candidate)
        if function is not replacement:
            return function
    raise TypeError(f"{owner.__name__} has no {name} of its own for {replacement.__name__}")


def _installed_sample(owner: type) -> "Any":
    return method_replaced(owner, "sample", sample_without_unique)


class PseudoSampler(Patch):
    """mmdet's ``PseudoSampler.sample`` without the host-side ``unique`` (lazypatch:
    ``ascend.pseudo_sampler_mmdet2`` on mmdet 2.x's path, DrivingSDK's target, and
    ``ascend.pseudo_sampler`` on mmdet 3.x's, the alias)."""

    name = "pseudo_sampler"
    legacy_name = "pseudo_sampler"
    target_module = "mmdet"

    @staticmethod
    def _precheck() -> bool:
        from importlib.util import find_spec
        try:
            return find_spec("mmdet") is not None
        except (ImportError, ValueError):
            return False

    _sample_replacement = staticmethod(sample_without_unique)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch(
            "mmdet.core.bbox.samplers.pseudo_sampler.PseudoSampler.sample",
            cls._sample_replacement, precheck=cls._precheck,
            aliases=["mmdet.models.task_modules.samplers.pseudo_sampler.PseudoSampler.sample"],
            pack_patches=("ascend.pseudo_sampler_mmdet2", "ascend.pseudo_sampler"),
            bound_replacement=lambda mmdet, sample: sample_of(sample))]


RESNET = "mmdet.models.backbones.resnet"


class ResNetAddRelu(Patch):
    """mmdet ResNet blocks with the residual add and ReLU fused
    (lazypatch: ``ascend.resnet_add_relu``)."""

    name = "resnet_add_relu"
    legacy_name = "resnet_add_relu"
    target_module = "mmdet"

    _basicblock_forward_replacement = staticmethod(pack_function(
        "ascend.resnet", "basic_block_forward",
        "``BasicBlock.forward`` with ``relu(out + identity)`` by mx_driving.npu_add_relu."))
    _bottleneck_forward_replacement = staticmethod(pack_function(
        "ascend.resnet", "bottleneck_forward",
        "``Bottleneck.forward`` with ``relu(out + identity)`` by mx_driving.npu_add_relu."))

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        pack = ("ascend.resnet_add_relu",)
        return [BuiltinAtomicPatch(f"{RESNET}.BasicBlock.forward",
                                   cls._basicblock_forward_replacement, pack_patches=pack),
                BuiltinAtomicPatch(f"{RESNET}.Bottleneck.forward",
                                   cls._bottleneck_forward_replacement, pack_patches=pack)]


class ResNetMaxPool(Patch):
    """mmdet ``ResNet.forward`` with the stem max-pool by mx_driving's kernel in
    inference (lazypatch: ``ascend.resnet_maxpool``)."""

    name = "resnet_maxpool"
    legacy_name = "resnet_maxpool"
    target_module = "mmdet"

    _forward_replacement = staticmethod(pack_function(
        "ascend.resnet", "resnet_forward",
        "``ResNet.forward`` with the stem max-pool by mx_driving.npu_max_pool2d."))

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch(f"{RESNET}.ResNet.forward", cls._forward_replacement,
                                   pack_patches=("ascend.resnet_maxpool",))]


class ResNetFP16(Patch):
    """mmdet ``ResNet.forward`` under float16 autocast, outputs as float32 (lazypatch:
    ``ascend.resnet_fp16``); the same slot as ``resnet_maxpool``, hence the conflict."""

    name = "resnet_fp16"
    legacy_name = "resnet_fp16"
    target_module = "mmdet"
    conflicts_with = ("resnet_maxpool",)

    @staticmethod
    def _forward_replacement(self: "Any", x: "Any") -> "Any":
        """ResNet's forward as it was before any patch, under float16 autocast on the
        input's device type, its outputs as float32."""
        forward = method_replaced(type(self), "forward", ResNetFP16._forward_replacement)
        return fp16_forward(forward, self, x)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch(f"{RESNET}.ResNet.forward", cls._forward_replacement,
                                   pack_patches=("ascend.resnet_fp16",),
                                   bound_replacement=lambda mmdet, forward: fp16_of(forward))]


def fp16_of(forward: "Callable[..., Any]") -> "Callable[..., Any]":
    """A ``forward`` method running ``forward`` under float16 autocast (``fp16_forward``)."""
    def forward_in_fp16(self: "Any", x: "Any") -> "Any":
        return fp16_forward(forward, self, x)
    forward_in_fp16.__wrapped__ = forward   # type: ignore[attr-defined]
    forward_in_fp16.__name__ = "forward"
    return forward_in_fp16


def fp16_forward(forward: "Callable[..., Any]", self: "Any", x: "Any") -> "Any":
    """``forward(self, x)`` under float16 autocast on the input's device type, its
    outputs as float32."""
    import torch
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        outs = forward(self, x)
    return tuple(out.float() for out in outs)


# -- mmdet3d ------------------------------------------------------------------------

class NuScenesDataset(Patch):
    """mmdet3d 0.x/1.0rc's ``datasets.nuscenes_dataset.output_to_nusc_box``: boxes read
    once, rotations in closed form (no lazypatch pack: the replacement is here)."""

    name = "nuscenes_dataset"
    legacy_name = "nuscenes_dataset"
    target_module = "mmdet3d"

    @staticmethod
    def _replacement(detection: "Dict[str, Any]", with_velocity: bool = True) -> "List[Any]":
        """The detection's boxes as nuScenes ``Box`` objects: every tensor converted once
        (not one element at a time), each yaw a quaternion about z."""
        import numpy
        import pyquaternion
        from nuscenes.utils.data_classes import Box

        boxes = detection["boxes_3d"]
        scores = detection["scores_3d"].numpy()
        labels = detection["labels_3d"].numpy()
        centers = boxes.gravity_center.numpy()
        dims = boxes.dims.numpy()
        yaws = -boxes.yaw.numpy() - numpy.pi / 2
        velocities = boxes.tensor[:, 7:9].numpy() if with_velocity else None
        result = []
        for index in range(len(boxes)):
            velocity = (*velocities[index], 0.0) if velocities is not None else (0, 0, 0)
            result.append(Box(centers[index], dims[index],
                              pyquaternion.Quaternion(axis=[0, 0, 1], radians=yaws[index]),
                              label=labels[index], score=scores[index], velocity=velocity))
        return result

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [AtomicPatch("mmdet3d.datasets.nuscenes_dataset.output_to_nusc_box",
                            cls._replacement, precheck=nuscenes_kit_available)]


class NuScenesMetric(Patch):
    """mmdet3d 1.x's ``output_to_nusc_box`` of the nuScenes metric: boxes read once,
    rotations in closed form (lazypatch: ``ascend.nuscenes_metric``)."""

    name = "nuscenes_metric"
    legacy_name = "nuscenes_metric"
    target_module = "mmdet3d"

    _replacement = staticmethod(pack_function(
        "ascend.nuscenes", "output_to_nusc_box",
        "The metric's boxes as nuScenes ``Box`` objects and their attributes, read once."))

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch("mmdet3d.evaluation.metrics.output_to_nusc_box",
                                   cls._replacement, precheck=nuscenes_kit_available,
                                   pack_patches=("ascend.nuscenes_metric",))]


NuScenes = NuScenesDataset


# -- numpy --------------------------------------------------------------------------

class NumpyCompat(Patch):
    """NumPy's removed aliases (``np.bool``, ``np.float``, ``np.int`` and the rest of
    NumPy 1.20-2.0's removals; lazypatch: the ``numpy_compat`` pack)."""

    name = "numpy_compat"
    legacy_name = "numpy_type"
    target_module = "numpy"
    apply_before_collect = True

    @staticmethod
    def _patch_deprecated_aliases(np_module: "Any", _options: "Any") -> None:
        """DrivingSDK 1.0's ``numpy_type``: ``bool``, ``float`` and ``int`` set on the
        module where it lacks them; AttributeError (skipped) where it has all three."""
        missing = [alias for alias in (bool, float, int)
                   if not hasattr(np_module, alias.__name__)]
        if not missing:
            raise AttributeError("numpy_compat: this NumPy still has bool, float and int; "
                                 "nothing to add")
        for alias in missing:
            setattr(np_module, alias.__name__, alias)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinLegacyPatch(cls._patch_deprecated_aliases, options, "numpy",
                                   pack_patches=("numpy_compat.attribute_hook",
                                                 "numpy_compat.type_aliases",
                                                 "numpy_compat.function_aliases",
                                                 "numpy_compat.constant_aliases"))]


# -- torch --------------------------------------------------------------------------

class TensorIndex(Patch):
    """``Tensor[bool mask]`` on 1-D/2-D tensors as ``torch.masked_select``
    (lazypatch: ``ascend.tensor_bool_index``)."""

    name = "tensor_index"
    legacy_name = "index"
    target_module = "torch"

    @staticmethod
    def _runtime_check(self: "Any", indices: "Any", *_: "Any", **__: "Any") -> bool:
        """Whether ``self[indices]`` is a boolean mask ``masked_select`` computes."""
        import torch
        return (isinstance(indices, torch.Tensor) and indices.dtype == torch.bool
                and indices.dim() == 1 and (self.dim() == 1 or (
                    self.dim() == 2 and self.shape[0] == indices.shape[0])))

    _replacement = staticmethod(pack_function(
        "ascend.tensor_ops", "masked_select_index",
        "``tensor[mask]`` by torch.masked_select (None where the mask does not fit)."))

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch("torch.Tensor.__getitem__", cls._replacement,
                                   runtime_check=cls._runtime_check,
                                   pack_patches=("ascend.tensor_bool_index",))]


class BatchMatmul(Patch):
    """``torch.matmul`` / ``Tensor.matmul`` / ``@`` by mx_driving's batch kernel where
    the shapes allow (lazypatch: ``ascend.batch_matmul``)."""

    name = "batch_matmul"
    legacy_name = "batch_matmul"
    target_module = "torch"

    @staticmethod
    def _check_shape_bmm(a: "Any", b: "Any") -> bool:
        """Whether ``a @ b`` is the kernel's case: 4 to 7 dims each, broadcastable batch
        dims, square matrices times column vectors."""
        if not hasattr(a, "dim") or not hasattr(b, "dim") or a.dim() != b.dim() \
                or not 4 <= a.dim() <= 7:
            return False
        if not all(x == y or 1 in (x, y) for x, y in zip(a.shape[:-2], b.shape[:-2])):
            return False
        return a.shape[-2] == a.shape[-1] == b.shape[-2] and b.shape[-1] == 1

    @staticmethod
    def _runtime_check(a: "Any", b: "Any", *_: "Any", **__: "Any") -> bool:
        return BatchMatmul._check_shape_bmm(a, b)

    @staticmethod
    def _replacement(a: "Any", b: "Any") -> "Any":
        """``mx_driving.npu_batch_matmul(a, b)``."""
        return mx_driving_function("npu_batch_matmul")(a, b)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        return [BuiltinAtomicPatch(target, cls._replacement, runtime_check=cls._runtime_check,
                                   pack_patches=("ascend.batch_matmul",))
                for target in ("torch.matmul", "torch.Tensor.matmul", "torch.Tensor.__matmul__")]


# -- torch_scatter ------------------------------------------------------------------

def _scatter_arguments(npu_function: "Callable[..., Any]") -> "Callable[..., Any]":
    """torch_scatter's signature on mx_driving's scatter kernels: float source, int32
    index, and their argument order (out before dim)."""
    def scatter(src: "Any", index: "Any", dim: int = -1, out: "Any" = None,
                dim_size: "Optional[int]" = None) -> "Any":
        import torch
        return npu_function(src.float(), index.to(torch.int32), out, dim, dim_size)
    return scatter


def _mx_driving_installed() -> bool:
    """Whether DrivingSDK's operators are installed (the ``mx_driving`` distribution)."""
    from .versions import get_version
    return get_version("mx_driving") is not None


class TorchScatter(Patch):
    """torch_scatter's ``scatter_sum``/``mean``/``max`` (in ``torch_scatter.scatter`` and
    their top-level re-exports) by mx_driving's kernels, where those are installed (no
    lazypatch pack: declared here)."""

    name = "torch_scatter"
    legacy_name = "scatter"
    target_module = "torch_scatter"

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        kernels = (("scatter_sum", "scatter_add"), ("scatter_mean", "scatter_mean"),
                   ("scatter_max", "scatter_max"))
        return [AtomicPatch(f"{module}.{function}", f"mx_driving.{kernel}",
                            replacement_wrapper=_scatter_arguments,
                            precheck=_mx_driving_installed)
                for module in ("torch_scatter.scatter", "torch_scatter")
                for function, kernel in kernels]


__all__ = ["BuiltinAtomicPatch", "BuiltinRegistryPatch", "BuiltinLegacyPatch",
           "enable_pack_patches", "MultiScaleDeformableAttention", "DeformConv",
           "ModulatedDeformConv", "SparseConv3D", "Voxelization", "Stream", "DDP",
           "OptimizerHooks", "OptimizerWrapper", "PseudoSampler", "ResNetAddRelu",
           "ResNetMaxPool", "ResNetFP16", "NuScenesDataset", "NuScenesMetric", "NuScenes",
           "NumpyCompat", "TensorIndex", "BatchMatmul", "TorchScatter",
           "nuscenes_kit_available"]
