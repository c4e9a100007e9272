"""mmdet's FocalLoss on the CPU computes what its CUDA branch (mmcv's sigmoid_focal_loss
kernel) computes: a label outside [0, C), -1 for ignored or denoising queries, is
"no positive class". mmdet 2.x and 3.x share the branch, so these run in either stack
(mmdet 3.3 in requirements/stack.txt, mmdet 2.28 in stack1x.txt), in a fresh interpreter.
In the 1.x stack ``import mmdet.models`` reaches torchvision (mmcv.runner imports it),
so the scenarios enable ``cuda_extensions`` there, as the zoo's users do.
"""
from __future__ import annotations

import textwrap

import pytest
from packs.openmmlab.openmmlab1x import IN_STACK_1X, needs_torchvision_stand_in

from lazypatch import installed_version

pytestmark = [pytest.mark.skipif(installed_version("mmdet") is None,
                                 reason="needs mmdet (requirements/stack.txt or stack1x.txt)"),
              needs_torchvision_stand_in]

ENABLE = {"LAZYPATCH_ENABLE": "cuda_extensions"} if IN_STACK_1X else {}

#: The kernel's arithmetic written out: one-hot only for labels inside [0, C).
SCENARIO = """
    import json, lazypatch, torch
    import torch.nn.functional as F
    from mmdet.models.losses.focal_loss import FocalLoss

    def reference(pred, labels, gamma=2.0, alpha=0.25):
        classes = torch.arange(pred.size(1))
        target = (labels[:, None] == classes[None]).to(pred.dtype)   # -1 matches no class
        probability = pred.sigmoid()
        pt = (1 - probability) * target + probability * (1 - target)
        weight = (alpha * target + (1 - alpha) * (1 - target)) * pt.pow(gamma)
        return F.binary_cross_entropy_with_logits(pred, target, reduction="none") * weight

    torch.manual_seed(0)
    pred = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 3, -1, 4, 2, -1, 1])      # 4 = C: mmdet's own background
    try:
        loss = FocalLoss(reduction="none", loss_weight=1.0)(pred, labels)
    except Exception as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        raise SystemExit
    expected = reference(pred, labels)
    gradient, = torch.autograd.grad(loss.sum(), pred)
    expected_gradient, = torch.autograd.grad(expected.sum(), pred)
    mean = FocalLoss()(pred, labels, avg_factor=3.0)
    records = {r.name: r for r in lazypatch.report()}
    record = records["openmmlab.mmdet_focal_loss_cpu"]
    print(json.dumps({"loss": float((loss - expected).abs().max()),
                      "gradient": float((gradient - expected_gradient).abs().max()),
                      "mean": [float(mean), float(expected.sum() / 3.0)],
                      "status": record.status, "notes": record.notes}))
"""


def test_labels_outside_the_classes_are_background_on_the_cpu(interpreter):
    result = interpreter.run_json("import lazypatch.auto\n" + textwrap.dedent(SCENARIO),
                                  env=ENABLE)
    assert result.get("error") is None, result
    assert result["loss"] < 1e-12 and result["gradient"] < 1e-12
    assert abs(result["mean"][0] - result["mean"][1]) < 1e-6   # mmdet adds float32 eps
    assert result["status"] == "applied"
    assert "labels outside [0, num_classes)" in result["notes"][0]


def test_the_same_loss_fails_without_the_patch(interpreter):
    result = interpreter.run_json("import lazypatch.auto\n"
                                  + textwrap.dedent(SCENARIO.split("    records =")[0])
                                  + "print(json.dumps({}))\n",
                                  env={**ENABLE, "LAZYPATCH_DISABLE": "openmmlab.mmdet_focal_loss_cpu"})
    assert "Class values must be non-negative" in result["error"]


def test_the_cuda_branch_and_mmdets_own_background_are_unchanged(interpreter):
    # Labels inside [0, C] give the same loss with and without the patch, and the
    # edited forward still takes mmcv's kernel where it did (the `is_cuda` test stays).
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json, inspect, torch
        from mmdet.models.losses.focal_loss import FocalLoss
        torch.manual_seed(1)
        pred = torch.randn(6, 3, dtype=torch.float64)
        labels = torch.tensor([0, 1, 2, 3, 3, 1])
        patched = FocalLoss(reduction="none")(pred, labels)
        edited = FocalLoss.forward
        lazypatch.unpatch("openmmlab.mmdet_focal_loss_cpu")
        original = FocalLoss(reduction="none")(pred, labels)
        print(json.dumps([float((patched - original).abs().max()),
                          FocalLoss.forward is edited.__wrapped__,
                          "is_cuda" in inspect.getsource(edited.__wrapped__)]))
    """, env=ENABLE)
    assert result == [0.0, True, True]


def test_a_forward_without_the_cuda_branch_is_left_alone(interpreter):
    interpreter.write({"other_focal.py": """
        import torch.nn.functional as F

        class FocalLoss:
            def forward(self, pred, target):
                return F.one_hot(target, num_classes=pred.size(1) + 1)
    """})
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json
        from lazypatch.registry.openmmlab.focal_loss import align_cpu_branch

        @lazypatch.when_imported("other_focal", name="test.focal")
        def focal(module, patch):
            align_cpu_branch(module, patch)

        import other_focal
        record = next(r for r in lazypatch.report() if r.name == "test.focal")
        print(json.dumps([record.status, record.reason]))
    """)
    status, reason = result
    assert status == "skipped"
    assert reason.startswith("other_focal.FocalLoss.forward left alone: it has no "
                             "`one_hot(labels, num_classes=N + 1)` in the else branch")
