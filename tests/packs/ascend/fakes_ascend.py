"""Sources of FAKE ``torch_npu`` and ``mx_driving`` packages for the Ascend pack tests.

Ascend NPUs (and the CANN libraries torch_npu needs) cannot exist on the CI
machines, so these tests install small real packages, with dist-info
metadata (the pack's ``requires`` reads installed distributions), whose
kernels are CPU reference implementations. Each kernel counts its calls in
``CALLS`` so a test can tell the NPU path from the PyTorch path.

Use: ``interpreter.write(ASCEND_FAKES)``.
"""

TORCH_NPU_INIT = '''
"""FAKE torch_npu: a CPU ``torch.npu`` namespace and fused optimizers."""
import collections
import types

import torch

CALLS = collections.Counter()

npu = types.ModuleType("torch_npu.npu")
npu.is_available = lambda: True
npu.device_count = lambda: 1
npu.current_device = lambda: 0
npu.synchronize = lambda device=None: None
torch.npu = npu   # what the real torch_npu registers

from . import optim  # noqa: E402
'''

TORCH_NPU_OPTIM = '''
"""FAKE torch_npu.optim: NpuFusedSGD with clip_grad_norm_fused_ (CPU reference)."""
import torch


class NpuFusedSGD(torch.optim.SGD):
    def clip_grad_norm_fused_(self, max_norm, norm_type=2):
        from torch_npu import CALLS
        CALLS["clip_grad_norm_fused_"] += 1
        params = [p for group in self.param_groups for p in group["params"]
                  if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
'''

MX_DRIVING_INIT = '''
"""FAKE mx_driving: DrivingSDK kernels as CPU reference implementations."""
import collections

import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401  (the real package imports it too)

CALLS = collections.Counter()


def npu_add_relu(x, y):
    CALLS["npu_add_relu"] += 1
    return F.relu(x + y)


def npu_max_pool2d(x, kernel_size, stride, padding):
    CALLS["npu_max_pool2d"] += 1
    return F.max_pool2d(x, kernel_size, stride, padding)


def npu_batch_matmul(a, b):
    """Square matrices times column vectors, without torch.matmul."""
    CALLS["npu_batch_matmul"] += 1
    return (a * b.transpose(-1, -2)).sum(-1, keepdim=True)


from .spconv import (SparseConv3d, SparseConvTensor, SparseInverseConv3d,  # noqa: E402
                     SparseModule, SparseSequential, SubMConv3d)
'''

MX_DRIVING_SPCONV = '''
"""FAKE mx_driving.spconv: the sparse family (construction only)."""
import torch
from torch import nn


class SparseConvTensor:
    def __init__(self, features, indices, spatial_shape, batch_size):
        self.features, self.indices = features, indices
        self.spatial_shape, self.batch_size = spatial_shape, batch_size
        self.indice_dict = {}


class SparseModule(nn.Module):
    pass


class SparseSequential(SparseModule, nn.Sequential):
    pass


class SparseConvolution(SparseModule):
    def __init__(self, ndim, in_channels, out_channels, kernel_size=3, stride=1,
                 padding=0, dilation=1, groups=1, bias=True, subm=False,
                 output_padding=0, transposed=False, inverse=False, indice_key=None):
        super().__init__()
        self.ndim, self.subm, self.inverse, self.indice_key = ndim, subm, inverse, indice_key
        size = [kernel_size] * ndim if isinstance(kernel_size, int) else list(kernel_size)
        self.weight = nn.Parameter(torch.zeros(*size, in_channels, out_channels))


class SubMConv3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, indice_key=None):
        super().__init__(3, in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, True, indice_key=indice_key)


class SparseConv3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, indice_key=None):
        super().__init__(3, in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, indice_key=indice_key)


class SparseInverseConv3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, indice_key=None, bias=True):
        super().__init__(3, in_channels, out_channels, kernel_size, bias=bias,
                         inverse=True, indice_key=indice_key)
'''


def _metadata(name: str, version: str) -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"


#: Files to write with ``interpreter.write``: both packages and their dist-info.
ASCEND_FAKES = {
    "torch_npu/__init__.py": TORCH_NPU_INIT,
    "torch_npu/optim.py": TORCH_NPU_OPTIM,
    "torch_npu-2.1.0.dist-info/METADATA": _metadata("torch_npu", "2.1.0"),
    "mx_driving/__init__.py": MX_DRIVING_INIT,
    "mx_driving/spconv.py": MX_DRIVING_SPCONV,
    "mx_driving-1.0.0.dist-info/METADATA": _metadata("mx_driving", "1.0.0"),
}

#: Script prologue: register only the packs under test (the OpenMMLab pack
#: provides mmcv._ext and the mmcv version gate for mmdet); the OpenMMLab
#: pack's own mx_driving kernels are not what these tests are about.
PROLOGUE = '''
import json, sys
import lazypatch
import lazypatch.registry.ascend
import lazypatch.registry.openmmlab
lazypatch.disable("openmmlab.mx_driving")

def ascend_report():
    return {r.name: r for r in lazypatch.report() if r.name.startswith("ascend.")}
'''
