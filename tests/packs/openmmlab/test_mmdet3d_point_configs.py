"""mmdet3d 1.4's point-cloud detectors beyond SECOND and CenterPoint train a step on the CPU.

Each runs ``lazypatch run --enable device --enable cuda_extensions -- python
mmdet3d_scenes.py <config>`` in a fresh interpreter: the config is mmdet3d's own (the
wheel's ``.mim/configs``), the model is built from it and trained one step on a small
synthetic scene (mmdet3d_scenes.py). Together they reach every family of lazypatch's
pure-PyTorch ``mmcv._ext`` that mmcv implements only in CUDA: pillar scatter and
voxelization (PointPillars), sparse convolution and RoI-aware pooling (Part-A2),
stacked ball query and grouping, voxel and BEV interpolation (PV-RCNN), furthest point
sampling, ball query, grouping, three-NN interpolation and RoI point pooling
(PointRCNN), furthest point sampling with feature distances (3DSSD), and the indoor
PointNet++ heads (VoteNet, GroupFree3D).

Outdoor configs run on a scene shrunk 4 times in x and y (``shrink_extent``), as in
test_mmdet3d_sparse_configs.py, so that a step takes seconds on one core.
Not here: H3DNet, whose ``H3DBboxHead.forward`` adds in place to a ReLU's output
(``bbox_predictions += original_feature``) and so fails in backward on any device,
with or without lazypatch.
"""

from __future__ import annotations

import pytest
from packs.openmmlab.test_mmdet3d_sparse_configs import assert_trained, train

pytestmark = pytest.mark.stack

#: config -> (shrink, points per scene, what the step must have run on)
CONFIGS = {
    "pointpillars/pointpillars_hv_secfpn_8xb6-160e_kitti-3d-car.py": (4, 800, "model"),
    "parta2/parta2_hv_secfpn_8xb2-cyclic-80e_kitti-3d-car.py": (4, 800, "sparse encoder"),
    "pv_rcnn/pv_rcnn_8xb2-80e_kitti-3d-3class.py": (4, 800, "sparse encoder"),
    # PointNet++ backbones sample 4,096 (PointRCNN) and 4,096 (3DSSD) points first
    "point_rcnn/point-rcnn_8xb2_kitti-3d-3class.py": (4, 4096, "model"),
    "3dssd/3dssd_4xb4_kitti-3d-car.py": (4, 4096, "model"),
    "votenet/votenet_8xb8_scannet-3d.py": (1, 2048, "model"),
    "groupfree3d/groupfree3d_head-L6-O256_4xb8_scannet-seg.py": (1, 2048, "model"),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mmdet3d_config_trains_a_step_on_the_cpu(interpreter, config):
    shrink, points, watched = CONFIGS[config]
    result = train(interpreter, config, ["device", "cuda_extensions"], points=points,
                   shrink=shrink)
    assert result["mmcv_ext"] is True, result      # lazypatch's pure-PyTorch mmcv._ext ran
    assert result["watched"] == watched, result
    losses = result["losses"]
    assert losses["loss"] == losses["loss"] and 0 < losses["loss"] < float("inf"), losses
    if watched == "sparse encoder":
        assert_trained(result)
    else:
        # the step reached the backbone and the heads: most parameters moved (a
        # branch without a target in a one-box scene may get no gradient)
        assert result["parameters_moved"] > result["parameters"] // 2, result
