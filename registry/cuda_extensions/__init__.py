"""The CUDA-extension pack: pure-PyTorch stand-ins for CUDA-only extensions.

Off by default (tag ``cuda_extensions``); turn it on with
``LAZYPATCH_ENABLE=cuda_extensions``. Where ``flash_attn``, ``torch_scatter``
or ``apex`` is NOT installed, importing it then gives a module whose
functions and classes are written with plain PyTorch, so CUDA-era code runs
on the CPU or an NPU (slower, same numbers up to floating-point order):

=================================  =============================================
module                             what the stand-in carries
=================================  =============================================
``flash_attn``,                    ``flash_attn_func``, ``flash_attn_kvpacked_func``,
``flash_attn.flash_attn_interface`` ``flash_attn_qkvpacked_func``, ``flash_attn_varlen_func``
                                   (and its packed forms), 1.x's ``flash_attn_unpadded_*``,
                                   via ``scaled_dot_product_attention``
``flash_attn.bert_padding``        ``unpad_input``, ``pad_input``, ``index_first_axis``,
                                   ``index_put_first_axis``
``torch_scatter``                  ``scatter``, ``scatter_sum``/``add``/``mul``/``mean``/
                                   ``max``/``min``, ``segment_csr``, ``gather_csr``
``apex``, ``apex.amp``             ``amp.initialize`` (O0/O1 via ``torch.autocast``),
                                   ``amp.scale_loss`` (dynamic loss scaling),
                                   ``master_params``, ``state_dict``, ``load_state_dict``
``apex.optimizers``                ``FusedAdam`` (``torch.optim.Adam``; ``adam_w_mode``
                                   means decoupled weight decay, as AdamW)
``apex.normalization``             ``FusedLayerNorm``, ``FusedRMSNorm``
``spconv``, ``spconv.pytorch``     spconv 2's ``SparseConvTensor``, ``SparseSequential``,
(``.core``, ``.conv``, ``.pool``,  ``SubMConv``/``SparseConv``/``SparseConvTranspose``/
``.modules``, ``.functional``,     ``SparseInverseConv``/``SparseMaxPool`` 1-4d,
``.utils``, ``.tables``,           ``SparseAvgPool`` 1-3d, ``SparseGlobalMaxPool``/
``.identity``; ``spconv.core``,    ``SparseGlobalAvgPool``, ``AddTable``/``ConcatTable``/
``spconv.constants``)              ``JoinTable``, ``Identity``, ``ToDense``,
                                   ``functional.indice_*`` on the pure-PyTorch sparse
                                   kernels of ``shared.mmcv_ext``; ``utils.PointToVoxel``
                                   on its voxelization kernel; ``ConvAlgo`` and the
                                   weight-layout constants (``FILTER_HWIO`` ...)
=================================  =============================================

Each module is two patches: ``cuda_extensions.<module>`` (an import boundary,
``lazypatch.stand_in``) provides the empty module only when nothing installed
provides it, and ``cuda_extensions.<module>.pytorch`` fills it when it is
imported (``cuda_extensions.spconv.pure_pytorch`` for ``spconv``, whose own
submodule ``spconv.pytorch`` has the other name). A module that is really
installed is imported and left alone (both report ``skipped``). Unsupported
arguments (``alibi_slopes``, ``softcap``, ``amsgrad``, opt levels O2/O3, a
fused spconv activation, ...) raise ``NotImplementedError`` naming the argument,
never a silently different computation.

The compiled extensions that research projects build themselves (BEVFusion's
``bev_pool_ext`` and ``voxel_layer``, BEVDet's ``bev_pool_v2_ext``, DSVT's
``ingroup_inds_cuda``) get pure-PyTorch stand-ins when they are missing or cannot
load: ``project_extensions`` lists them, and ``declare_extension`` adds one more.

torchvision's compiled operators (``torch.ops.torchvision.nms``, ``roi_align``,
``roi_pool``, ``ps_roi_align``, ``ps_roi_pool``, ``deform_conv2d`` and their backward
operators) get pure-PyTorch stand-ins when its ``_C`` cannot load beside the installed
torch (a CUDA build beside a CPU torch): patch ``cuda_extensions.torchvision``,
``torchvision_stand_in`` and ``torchvision_ops``.

This file only declares (standard library and lazypatch): torch is imported
by the implementations, when one of these modules is imported.
"""

from __future__ import annotations

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "cuda_extensions"
TAGS = (PACK,)
OPT_IN = True
TARGETS = ("flash_attn", "torch_scatter", "apex", "spconv", "torchvision", "bevfusion", "dsvt",
           "projects", "mmdet3d_plugin", "mmdet3d", "GeometricKernelAttention",
           "MultiScaleDeformableAttention")
REQUIRES = ()

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Tuple

#: Set on every stand-in this pack provides: the fill patch acts on those only.
MARKER = "__lazypatch_pure_pytorch__"

FLASH_ATTENTION = ("flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
                   "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
                   "flash_attn_varlen_qkvpacked_func",
                   # flash-attn 1.x (StreamPETR and the models of its time)
                   "flash_attn_unpadded_func", "flash_attn_unpadded_kvpacked_func",
                   "flash_attn_unpadded_qkvpacked_func")

#: In place of an implementation: the names are the module's own submodules, imported
#: by the fill patch (the real ``apex/__init__`` imports them too); any declared
#: submodule among a module's names is imported so, whatever its implementation.
SUBMODULES = ""

_SPCONV_DIMS = ("1d", "2d", "3d", "4d")
SPCONV_TOP = ("SparseConvTensor", "ToDense", "RemoveGrid")
SPCONV_CONV = ("SparseConvolution",) + tuple(
    f"{kind}{dims}" for dims in _SPCONV_DIMS
    for kind in ("SparseConv", "SubMConv", "SparseConvTranspose", "SparseInverseConv"))
SPCONV_POOL = ("SparseMaxPool",) + tuple(f"SparseMaxPool{dims}" for dims in _SPCONV_DIMS)
SPCONV_MODULES = ("SparseModule", "SparseSequential", "SparseBatchNorm", "SparseReLU",
                  "SparseIdentity")
SPCONV_OTHER_POOLS = ("SparseAvgPool", "SparseAvgPool1d", "SparseAvgPool2d", "SparseAvgPool3d",
                      "SparseGlobalMaxOrAvgPool", "SparseGlobalMaxPool", "SparseGlobalAvgPool")
SPCONV_TABLES = ("AddTable", "ConcatTable", "JoinTable")

#: module -> (implementation module, relative to this pack, names it provides). Parents
#: come before their children so that each parent has its own named stand-in.
STAND_INS: "dict[str, Tuple[str, Tuple[str, ...]]]" = {
    "flash_attn": ("flash_attention", FLASH_ATTENTION),
    "flash_attn.flash_attn_interface": ("flash_attention", FLASH_ATTENTION),
    "flash_attn.bert_padding": ("flash_padding", ("index_first_axis", "index_put_first_axis",
                                                  "unpad_input", "pad_input")),
    "torch_scatter": ("..shared.scatter", ("scatter", "scatter_sum", "scatter_add", "scatter_mul",
                                  "scatter_mean", "scatter_max", "scatter_min", "segment_csr",
                                  "gather_csr")),
    "apex": (SUBMODULES, ("amp", "optimizers", "normalization")),
    "apex.amp": ("apex_amp", ("initialize", "scale_loss", "master_params", "state_dict",
                              "load_state_dict")),
    "apex.optimizers": ("apex_modules", ("FusedAdam",)),
    "apex.normalization": ("apex_modules", ("FusedLayerNorm", "FusedRMSNorm")),
    "spconv": ("spconv", ("__version__", "SPCONV_VERSION_NUMBERS", "ConvAlgo", "core",
                          "constants")),
    "spconv.core": ("spconv", ("ConvAlgo",)),
    "spconv.constants": ("spconv_constants", ("PACKAGE_NAME", "NDIM_DONT_CARE",
                                              "FILTER_HWIO", "ALL_WEIGHT_IS_KRSC",
                                              "SAVED_WEIGHT_LAYOUT", "SPCONV_ALLOW_TF32",
                                              "DISABLE_JIT", "SPCONV_FX_TRACE_MODE")),
    "spconv.pytorch": ("spconv_public", SPCONV_TOP + SPCONV_CONV + SPCONV_MODULES +
                       SPCONV_POOL + SPCONV_OTHER_POOLS + SPCONV_TABLES + (
                           "Identity", "assign_name_for_sparse_modules", "ConvAlgo",
                           "core", "conv", "pool", "modules", "functional", "utils",
                           "tables", "identity")),
    "spconv.pytorch.core": ("spconv", SPCONV_TOP[:1] + ("IndiceData", "expand_nd",
                                                        "scatter_nd")),
    "spconv.pytorch.conv": ("spconv", SPCONV_CONV),
    "spconv.pytorch.pool": ("spconv_public", SPCONV_POOL + SPCONV_OTHER_POOLS),
    "spconv.pytorch.tables": ("spconv_tables", SPCONV_TABLES),
    "spconv.pytorch.identity": ("spconv_tables", ("Identity",)),
    "spconv.pytorch.modules": ("spconv", SPCONV_MODULES + (
        "is_spconv_module", "is_sparse_conv", "assign_name_for_sparse_modules")),
    "spconv.pytorch.functional": ("spconv", ("indice_conv", "indice_inverse_conv",
                                             "indice_subm_conv", "indice_maxpool",
                                             "sparse_add")),
    "spconv.pytorch.utils": ("spconv_utils", ("PointToVoxel",
                                              "gather_features_by_pc_voxel_id")),
}


def _fill_function(module_name: str, implementation: str, names: "Tuple[str, ...]") -> "Any":
    def fill(module: "Any", patch: "Any") -> None:
        if MARKER not in vars(module):
            patch.skip(f"{module_name!r} is installed: the real one is used, untouched")
        from importlib import import_module

        from .project_extensions import implementation_module
        # A name that is a declared stand-in itself is that submodule: importing it
        # binds it on this module (its own patch records that), as the real
        # package's imports would (apex.amp, spconv.pytorch.functional).
        children = [name for name in names if f"{module_name}.{name}" in STAND_INS]
        for name in children:
            try:
                import_module(f"{module_name}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{module_name}.{name}":
                    raise
                # That stand-in was turned off: its import fails on its own.
                patch.note(f"{module_name}.{name} is not provided (turned off)")
        values = [name for name in names if name not in children]
        if implementation == SUBMODULES or not values:
            return
        source = implementation_module(implementation)
        for name in values:
            patch.setattr(module, name, getattr(source, name))
        shown = values if len(values) <= 10 else values[:8] + [f"{len(values) - 8} more"]
        patch.note(f"pure-PyTorch {', '.join(shown)}")
    fill.__doc__ = f"Fill the stand-in of {module_name} with pure-PyTorch {', '.join(names)}"
    fill.__qualname__ = f"fill_{module_name.replace('.', '_')}"
    return fill


def _declare(module_name: str, implementation: str, names: "Tuple[str, ...]") -> None:
    """The boundary (an empty, marked module when nothing installed provides it) and the
    patch that fills it; both off by default."""
    patch_name = f"{PACK}.{module_name}"
    lazypatch.stand_in(module_name, attributes={MARKER: PACK}, name=patch_name, tags=TAGS,
                       enabled=False)
    fill_name = fill_patch_name(module_name)
    lazypatch.when_imported(module_name, name=fill_name, tags=TAGS,
                            enabled=False)(_fill_function(module_name, implementation, names))


def fill_patch_name(module_name: str) -> str:
    """``cuda_extensions.<module>.pytorch``, the patch that fills the stand-in; for a
    module whose submodule ``pytorch`` is declared too (spconv), ``.pure_pytorch``."""
    suffix = "pure_pytorch" if f"{module_name}.pytorch" in STAND_INS else "pytorch"
    return f"{PACK}.{module_name}.{suffix}"


for _module_name, (_implementation, _names) in STAND_INS.items():
    _declare(_module_name, _implementation, _names)

# The compiled extensions of research projects (BEVFusion, DSVT, BEVDet, ...): see
# project_extensions; declare_extension is how a user adds one more.
from .project_extensions import declare_extension as declare_extension  # noqa: E402
from .project_extensions import declare_project_extensions  # noqa: E402

declare_project_extensions()


def _provide_torchvision_ops(extension: "Any", patch: "Any") -> None:
    """When torchvision's compiled library did not load beside this torch, define its
    operators (``torch.ops.torchvision.*``) in pure PyTorch; otherwise leave it alone."""
    from .torchvision_stand_in import provide
    provide(extension, patch)


# torchvision's operators: decided right after torchvision.extension tried to load _C
# (torch is imported by then), before torchvision's fake and autograd registrations.
TORCHVISION_PATCH = f"{PACK}.torchvision"
lazypatch.when_imported("torchvision.extension", name=TORCHVISION_PATCH, tags=TAGS,
                        enabled=False)(_provide_torchvision_ops)
