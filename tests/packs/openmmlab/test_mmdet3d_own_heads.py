"""mmdet3d 1.4's own dense-head tests, reproduced in a fresh interpreter on CPU.

``tests/test_models/test_dense_heads/test_fcos_mono3d_head.py``
(``TestFCOSMono3DHead::test_fcos_mono3d_head_loss``, Copyright OpenMMLab,
Apache-2.0) builds an FCOS3D head for nuScenes (10 classes, 9 attributes,
velocity, direction classifier), runs it on five random feature levels of a
1600x928 image, checks that every one of its nine losses is positive for
three random ground-truth boxes, and decodes 200 boxes with rotated BEV NMS.
With mmcv-lite, mmdet3d refuses to import (mmcv 2.2 is outside its range)
and the NMS has no compiled ``mmcv._ext``: both come from lazypatch here.
"""

from __future__ import annotations

FCOS_MONO3D_HEAD = """
    import lazypatch.auto
    import json, sys
    import mmengine
    import numpy as np
    import torch
    from mmengine.structures import InstanceData
    from mmdet3d.models.dense_heads import FCOSMono3DHead
    from mmdet3d.structures import CameraInstance3DBoxes
    import mmcv.ops

    ext = sys.modules["mmcv._ext"]
    calls = {"nms_rotated": 0}
    nms_rotated_kernel = ext.nms_rotated

    def counting_nms_rotated(*args, **kwargs):
        calls["nms_rotated"] += 1
        return nms_rotated_kernel(*args, **kwargs)

    ext.nms_rotated = counting_nms_rotated   # count what reaches the provided kernel
    torch.manual_seed(0)

    def cross_entropy(use_sigmoid):
        return dict(type="mmdet.CrossEntropyLoss", use_sigmoid=use_sigmoid, loss_weight=1.0)

    head = FCOSMono3DHead(
        num_classes=10, in_channels=32, feat_channels=32, stacked_convs=2,
        strides=[8, 16, 32, 64, 128],
        pred_attrs=True, pred_velo=True, use_direction_classifier=True,
        diff_rad_by_sin=True, dir_offset=0.7854, dir_limit_offset=0,
        # offset (2), depth (1), size (3), rotation (1), velocity (2)
        group_reg_dims=(2, 1, 3, 1, 2),
        reg_branch=((32, ), (32, ), (32, ), (32, ), ()),
        cls_branch=(32, ), dir_branch=(32, ), attr_branch=(32, ),
        loss_cls=dict(type="mmdet.FocalLoss", use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=1.0),
        loss_bbox=dict(type="mmdet.SmoothL1Loss", beta=1.0 / 9.0, loss_weight=1.0),
        loss_dir=cross_entropy(False), loss_attr=cross_entropy(False),
        loss_centerness=cross_entropy(True),
        bbox_coder=dict(type="FCOS3DBBoxCoder", code_size=9),
        norm_on_bbox=True, centerness_on_reg=True, center_sampling=True, conv_bias=True,
        dcn_on_last_conv=False,
        train_cfg=mmengine.Config(dict(
            allowed_border=0, pos_weight=-1, debug=False,
            code_weight=[1.0, 1.0, 0.2, 1.0, 1.0, 1.0, 1.0, 0.05, 0.05])),
        test_cfg=mmengine.Config(dict(
            use_rotate_nms=True, nms_across_levels=False, nms_pre=1000, nms_thr=0.8,
            score_thr=0.05, min_bbox_size=0, max_per_img=200)))

    # One image, strides 8 to 128 of a 928x1600 input.
    level_shapes = [(116, 200), (58, 100), (29, 50), (15, 25), (8, 13)]
    features = [torch.rand(1, 32, height, width) for height, width in level_shapes]
    outputs = head.forward(features)

    metas = [dict(cam2img=[[1260.8474446004698, 0.0, 807.968244525554],
                           [0.0, 1260.8474446004698, 495.3344268742088],
                           [0.0, 0.0, 1.0]],
                  scale_factor=np.ones(4, dtype=np.float32),
                  box_type_3d=CameraInstance3DBoxes)]
    labels = torch.randint(0, 10, [3])
    truth_3d = InstanceData(
        bboxes_3d=CameraInstance3DBoxes(torch.rand(3, 9), box_dim=9), labels_3d=labels,
        centers_2d=torch.rand(3, 2), depths=torch.rand(3), attr_labels=torch.randint(0, 9, [3]))
    truth_2d = InstanceData(bboxes=torch.rand(3, 4), labels=labels)
    losses = head.loss_by_feat(*outputs, [truth_3d], [truth_2d], metas)

    results_3d, results_2d = head.predict_by_feat(*outputs, metas)
    result = results_3d[0]
    print(json.dumps({
        "outputs": len(outputs),
        "levels": [len(output) for output in outputs],
        "first_cls_shape": list(outputs[0][0].shape),
        "losses": {name: float(value) for name, value in losses.items()},
        "results": len(results_3d),
        "results_2d": results_2d,
        "shapes": [list(result.bboxes_3d.tensor.shape), list(result.scores_3d.shape),
                   list(result.labels_3d.shape), list(result.attr_labels.shape)],
        "calls": calls,
    }))
"""

LOSSES = ["loss_cls", "loss_size", "loss_centerness", "loss_offset", "loss_depth",
          "loss_rotsin", "loss_velo", "loss_dir", "loss_attr"]


def test_fcos_mono3d_head_loss_and_predict(interpreter):
    result = interpreter.run_json(FCOS_MONO3D_HEAD, timeout=600)
    assert result["outputs"] == 5                       # cls, bbox, dir, attr, centerness
    assert result["levels"] == [5] * 5                  # five levels each
    assert result["first_cls_shape"] == [1, 10, 116, 200]
    # non-empty ground truth: every loss is positive on random inputs
    assert all(result["losses"][name] > 0 for name in LOSSES), result["losses"]
    assert result["results"] == 1 and result["results_2d"] is None   # no 2D result in FCOS3D
    assert result["shapes"] == [[200, 9], [200], [200], [200]]
    assert result["calls"]["nms_rotated"] >= 1          # the BEV NMS ran through the kernel


def test_fcos_mono3d_head_cannot_even_import_without_lazypatch(interpreter):
    result = interpreter.run(FCOS_MONO3D_HEAD, env={"LAZYPATCH": "0"}, check=False)
    assert result.returncode != 0
    assert "MMCV==2.2.0 is used but incompatible" in result.stderr, result.stderr[-2000:]
