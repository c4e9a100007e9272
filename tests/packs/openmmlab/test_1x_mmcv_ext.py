"""mmcv 1.7.2 installed without its compiled ops (``MMCV_WITH_OPS=0``) gets the same
pure-PyTorch ``mmcv._ext`` as mmcv-lite 2.x: every op module of ``mmcv.ops`` imports,
and the ops the zoo uses run and give the numbers of their definitions.

Runs in the 1.x stack only (requirements/stack1x.txt), in fresh interpreters. There,
``mmcv.ops`` imports ``mmcv.runner``, which imports torchvision: the scenarios enable
``cuda_extensions``, whose torchvision stand-in makes the index's torchvision importable
beside the CPU torch, as the zoo's users run (``--enable cuda_extensions``).
"""
from __future__ import annotations

from packs.openmmlab.openmmlab1x import needs_stack_1x, needs_torchvision_stand_in

pytestmark = [needs_stack_1x, needs_torchvision_stand_in]

ENABLE = {"LAZYPATCH_ENABLE": "cuda_extensions"}


def test_every_op_module_of_mmcv_1_7_imports(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, importlib, json, pkgutil
        import mmcv, mmcv.ops
        failed = {}
        names = [info.name for info in pkgutil.iter_modules(mmcv.ops.__path__)]
        for name in names:
            try:
                importlib.import_module(f"mmcv.ops.{name}")
            except Exception as error:
                failed[name] = f"{type(error).__name__}: {error}"
        record = next(r for r in lazypatch.report() if r.name == "openmmlab.mmcv_ext")
        print(json.dumps({"version": mmcv.__version__, "modules": len(names), "failed": failed,
                          "status": record.status, "origin": mmcv._ext.__spec__.origin}))
    """, env=ENABLE)
    assert result["version"] == "1.7.2"
    assert result["modules"] >= 60 and result["failed"] == {}
    assert result["status"] == "applied" and "pure PyTorch" in result["origin"]


def test_mmcv_ops_fails_without_the_provided_ext(interpreter):
    result = interpreter.run("import lazypatch.auto\nimport mmcv.ops", check=False,
                             env={**ENABLE, "LAZYPATCH_DISABLE": "openmmlab.mmcv_ext"})
    assert result.returncode != 0 and "No module named 'mmcv._ext'" in result.stderr


def test_the_zoos_ops_run_on_the_cpu(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto, json, torch
        import torch.nn.functional as F
        from mmcv.ops import (DeformConv2d, ModulatedDeformConv2d, Voxelization, nms,
                              roi_align, sigmoid_focal_loss)
        from mmcv.ops.multi_scale_deform_attn import (MultiScaleDeformableAttnFunction,
                                                      multi_scale_deformable_attn_pytorch)
        torch.manual_seed(0)
        out = {}
        # test_nms.py's case (mmcv's own expected numbers)
        boxes = torch.tensor([[6.0, 3.0, 8.0, 7.0], [3.0, 6.0, 9.0, 11.0],
                              [3.0, 7.0, 10.0, 12.0], [1.0, 4.0, 13.0, 7.0]])
        dets, keep = nms(boxes, torch.tensor([0.6, 0.9, 0.7, 0.2]), iou_threshold=0.3, offset=0)
        out["nms"] = keep.tolist()
        # RoIAlign of a constant map is that constant
        rois = torch.tensor([[0.0, 1.0, 1.0, 6.0, 6.0]])
        out["roi_align"] = roi_align(torch.full((1, 2, 8, 8), 3.0), rois, (2, 2), 1.0, 2,
                                     "avg", True).unique().tolist()
        # the compiled-op path of multi-scale deformable attention against mmcv's own
        # PyTorch formulation (test_ms_deformable_attn.py's check)
        shapes = torch.tensor([[6, 4], [3, 2]])
        start = torch.cat((shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]))
        value = torch.rand(1, int(shapes.prod(1).sum()), 2, 4, dtype=torch.float64,
                           requires_grad=True)
        locations = torch.rand(1, 5, 2, 2, 3, 2, dtype=torch.float64)
        weights = torch.rand(1, 5, 2, 2, 3, dtype=torch.float64).softmax(-1)
        kernel = MultiScaleDeformableAttnFunction.apply(value, shapes, start, locations,
                                                        weights, 64)
        reference = multi_scale_deformable_attn_pytorch(value, shapes, locations, weights)
        gradient, = torch.autograd.grad(kernel.sum(), value)
        reference_gradient, = torch.autograd.grad(reference.sum(), value)
        out["msda"] = [float((kernel - reference).abs().max()),
                       float((gradient - reference_gradient).abs().max())]
        # deformable convolutions with zero offsets are plain convolutions
        x = torch.rand(1, 4, 7, 7)
        deform = DeformConv2d(4, 6, 3, padding=1)
        offset = torch.zeros(1, 18, 7, 7)
        out["deform_conv"] = float((deform(x, offset)
                                    - F.conv2d(x, deform.weight, padding=1)).abs().max())
        modulated = ModulatedDeformConv2d(4, 6, 3, padding=1)
        mask = torch.ones(1, 9, 7, 7)
        out["modulated_deform_conv"] = float((modulated(x, offset, mask) - F.conv2d(
            x, modulated.weight, modulated.bias, padding=1)).abs().max())
        # the kernel's focal loss: -1 is no positive class
        pred = torch.randn(3, 2)
        labels = torch.tensor([1, -1, 0])
        target = (labels[:, None] == torch.arange(2)).float()
        p = pred.sigmoid()
        pt = (1 - p) * target + p * (1 - target)
        expected = F.binary_cross_entropy_with_logits(pred, target, reduction="none") * (
            (0.25 * target + 0.75 * (1 - target)) * pt.pow(2))
        out["focal"] = float((sigmoid_focal_loss(pred, labels, 2.0, 0.25, None, "none")
                              - expected).abs().max())
        # hard voxelization: two points share a voxel, one is outside the range
        points = torch.tensor([[0.1, 0.1, 0.1], [0.2, 0.2, 0.2], [1.5, 0.5, 0.5],
                               [9.0, 9.0, 9.0]])
        voxels, coordinates, counts = Voxelization([1.0, 1.0, 1.0], [0, 0, 0, 2, 2, 2], 4, 4)(points)
        out["voxelization"] = [voxels.shape[0], sorted(counts.tolist())]
        print(json.dumps(out))
    """, env=ENABLE)
    assert result["nms"] == [1, 0, 3]
    assert result["roi_align"] == [3.0]
    assert max(result["msda"]) < 1e-12
    assert result["deform_conv"] < 1e-5 and result["modulated_deform_conv"] < 1e-5
    assert result["focal"] < 1e-6
    assert result["voxelization"] == [2, [1, 2]]
