"""mmcv 2.2.0's own op tests (``tests/test_ops``), reproduced on the CPU against
lazypatch's pure-PyTorch ``mmcv._ext``.

The inputs and expected numbers are mmcv's (Copyright OpenMMLab, Apache-2.0),
case by case: ``test_nms.py::test_nms_allclose``, ``test_roi_align.py``
(``_test_roialign_allclose``, float and float64), ``test_deform_conv.py``
(``_test_deformconv``, float and double), ``test_modulated_deform_conv.py``
(``_test_mdconv``, float and double: the zero-offset case whose offset
gradient needs mmcv's own derivative rule), ``test_nms_rotated.py``
(``test_nms_rotated``, ``test_ml_nms_rotated``; mmcv runs them on devices
only, here on the CPU), ``test_box_iou_rotated.py`` (``_cpu`` IoU and IoF).
Multi-scale deformable attention follows ``test_ms_deformable_attn.py``'s
``test_forward_equal_with_pytorch_double/float``: the kernel must equal mmcv's
own ``multi_scale_deformable_attn_pytorch``. ``test_voxelization.py`` reads
recorded lidar points from a data file of mmcv's repository
(``for_3d_ops/test_voxel.npy``); its cases run here on a cloud of the same
kind drawn with a fixed seed (see that section).

The module-scoped fixture imports ``mmcv.ops`` with the provided ``mmcv._ext``
in place, as lazypatch provides it, and removes what it imported afterwards.
"""
from __future__ import annotations

import mmcv  # noqa: F401  (the real mmcv-lite must be installed: requirements/stack.txt)
import numpy as np
import pytest
import torch

# ``ops``: mmcv.ops against the pure-PyTorch mmcv._ext (tests/conftest.py).


# -- test_nms.py ---------------------------------------------------------------


def test_nms_allclose(ops):
    boxes = torch.tensor([[6.0, 3.0, 8.0, 7.0], [3.0, 6.0, 9.0, 11.0],
                          [3.0, 7.0, 10.0, 12.0], [1.0, 4.0, 13.0, 7.0]])
    scores = torch.tensor([0.6, 0.9, 0.7, 0.2])
    dets, inds = ops.nms(boxes, scores, iou_threshold=0.3, offset=0)
    assert np.allclose(dets.numpy(), [[3.0, 6.0, 9.0, 11.0, 0.9],
                                      [6.0, 3.0, 8.0, 7.0, 0.6],
                                      [1.0, 4.0, 13.0, 7.0, 0.2]])
    assert inds.tolist() == [1, 0, 3]


# -- test_roi_align.py ----------------------------------------------------------

ROI_INPUTS = [([[[[1., 2.], [3., 4.]]]], [[0., 0., 0., 1., 1.]]),
              ([[[[1., 2.], [3., 4.]], [[4., 3.], [2., 1.]]]],
               [[0., 0., 0., 1., 1.]]),
              ([[[[1., 2., 5., 6.], [3., 4., 7., 8.], [9., 10., 13., 14.],
                  [11., 12., 15., 16.]]]], [[0., 0., 0., 3., 3.]])]
ROI_OUTPUTS = [([[[[1.0, 1.25], [1.5, 1.75]]]],
                [[[[3.0625, 0.4375], [0.4375, 0.0625]]]]),
               ([[[[1.0, 1.25], [1.5, 1.75]], [[4.0, 3.75], [3.5, 3.25]]]],
                [[[[3.0625, 0.4375], [0.4375, 0.0625]],
                  [[3.0625, 0.4375], [0.4375, 0.0625]]]]),
               ([[[[1.9375, 4.75], [7.5625, 10.375]]]],
                [[[[0.47265625, 0.42968750, 0.42968750, 0.04296875],
                   [0.42968750, 0.39062500, 0.39062500, 0.03906250],
                   [0.42968750, 0.39062500, 0.39062500, 0.03906250],
                   [0.04296875, 0.03906250, 0.03906250, 0.00390625]]]])]


@pytest.mark.parametrize("dtype", [torch.float, torch.double])
def test_roialign_allclose(ops, dtype):
    for (image, rois), (expected, expected_grad) in zip(ROI_INPUTS, ROI_OUTPUTS):
        x = torch.tensor(image, dtype=dtype, requires_grad=True)
        output = ops.roi_align(x, torch.tensor(rois, dtype=dtype), (2, 2), 1.0, 2,
                               "avg", True)
        output.backward(torch.ones_like(output))
        assert np.allclose(output.detach().float().numpy(), expected, atol=1e-3)
        assert np.allclose(x.grad.float().numpy(), expected_grad, atol=1e-3)


# -- test_deform_conv.py ----------------------------------------------------------

DCN_INPUT = [[[[1., 2., 3.], [0., 1., 2.], [3., 5., 2.]]]]
DCN_OFFSET_WEIGHT = [[[0.1, 0.4, 0.6, 0.1]], [[0.3, 0.2, 0.1, 0.3]],
                     [[0.5, 0.5, 0.2, 0.8]], [[0.8, 0.3, 0.9, 0.1]],
                     [[0.3, 0.1, 0.2, 0.5]], [[0.3, 0.7, 0.5, 0.3]],
                     [[0.6, 0.2, 0.5, 0.3]], [[0.4, 0.1, 0.8, 0.4]]]
DCN_OFFSET_BIAS = [0.7, 0.1, 0.8, 0.5, 0.6, 0.5, 0.4, 0.7]
DCN_WEIGHT = [[[0.4, 0.2, 0.1, 0.9]]]
DCN_OUT = [[[[1.650, 0.], [0.000, 0.]]]]
DCN_X_GRAD = [[[[-0.666, 0.204, 0.000], [0.030, -0.416, 0.012],
                [0.000, 0.252, 0.129]]]]
DCN_OFFSET_WEIGHT_GRAD = [[[[1.44, 2.88], [0.00, 1.44]]],
                          [[[-0.72, -1.44], [0.00, -0.72]]],
                          [[[0.00, 0.00], [0.00, 0.00]]],
                          [[[0.00, 0.00], [0.00, 0.00]]],
                          [[[-0.10, -0.20], [0.00, -0.10]]],
                          [[[-0.08, -0.16], [0.00, -0.08]]],
                          [[[-0.54, -1.08], [0.00, -0.54]]],
                          [[[-0.54, -1.08], [0.00, -0.54]]]]
DCN_OFFSET_BIAS_GRAD = [1.44, -0.72, 0., 0., -0.10, -0.08, -0.54, -0.54]
DCN_WEIGHT_GRAD = [[[[3.62, 0.], [0.40, 0.18]]]]


@pytest.mark.parametrize("dtype, threshold", [(torch.float, 1e-1), (torch.double, 1e-3)])
def test_deformconv(ops, dtype, threshold):
    batch = 10
    x = torch.tensor(np.repeat(DCN_INPUT, batch, axis=0), dtype=dtype, requires_grad=True)
    model = ops.DeformConv2dPack(in_channels=1, out_channels=1, kernel_size=2, stride=1,
                                 padding=0, im2col_step=2)
    model.conv_offset.weight.data = torch.Tensor(DCN_OFFSET_WEIGHT).reshape(8, 1, 2, 2)
    model.conv_offset.bias.data = torch.Tensor(DCN_OFFSET_BIAS)
    model.weight.data = torch.Tensor(DCN_WEIGHT).reshape(1, 1, 2, 2)
    model.type(dtype)
    out = model(x)
    out.backward(torch.ones_like(out))
    assert np.allclose(out.detach().numpy(), np.repeat(DCN_OUT, batch, axis=0), threshold)
    assert np.allclose(x.grad.numpy(), np.repeat(DCN_X_GRAD, batch, axis=0), threshold)
    assert np.allclose(model.conv_offset.weight.grad.numpy() / batch,
                       DCN_OFFSET_WEIGHT_GRAD, threshold)
    assert np.allclose(model.conv_offset.bias.grad.numpy() / batch,
                       DCN_OFFSET_BIAS_GRAD, threshold)
    assert np.allclose(model.weight.grad.numpy() / batch, DCN_WEIGHT_GRAD, threshold)


# -- test_modulated_deform_conv.py ------------------------------------------------

MDCN_INPUT = [[[[1., 2., 3.], [1., 2., 3.], [1., 2., 3.]]]]
MDCN_OUT = [[[[0.5, 1.5, 2.5, 1.5], [1.0, 3.0, 5.0, 3.0], [1.0, 3.0, 5.0, 3.0],
              [0.5, 1.5, 2.5, 1.5]]]]
MDCN_INPUT_GRAD = [[[[2., 2., 2.], [2., 2., 2.], [2., 2., 2.]]]]
MDCN_WEIGHT_GRAD = [[[[9., 9.], [9., 9.]]]]
MDCN_OFFSET_WEIGHT_GRAD = [[[[-7.0, -4.0], [0.0, 0.0]]], [[[-9.0, 7.5], [-6.0, 5.0]]],
                           [[[-4.0, -7.0], [0.0, 0.0]]], [[[-7.5, -9.0], [-5.0, -6.0]]],
                           [[[-7.0, -4.0], [-7.0, -4.0]]], [[[-6.0, 5.0], [-9.0, 7.5]]],
                           [[[-4.0, -7.0], [-4.0, -7.0]]], [[[-5.0, -6.0], [-7.5, -9.0]]],
                           [[[10.5, 6.0], [7.0, 4.0]]], [[[6.0, 10.5], [4.0, 7.0]]],
                           [[[7.0, 4.0], [10.5, 6.0]]], [[[4.0, 7.0], [6.0, 10.5]]]]
MDCN_OFFSET_BIAS_GRAD = [-3.0, -1.5, -3.0, -1.5, -3.0, -1.5, -3.0, -1.5, 4.5, 4.5, 4.5,
                         4.5]


@pytest.mark.parametrize("dtype", [torch.float, torch.double])
def test_mdconv(ops, dtype):
    x = torch.tensor(MDCN_INPUT, dtype=dtype, requires_grad=True)
    dcn = ops.ModulatedDeformConv2dPack(1, 1, kernel_size=(2, 2), stride=1, padding=1,
                                        deform_groups=1, bias=False)
    dcn.weight.data.fill_(1.)
    dcn.type(dtype)
    output = dcn(x)
    output.sum().backward()
    assert np.allclose(output.detach().numpy(), MDCN_OUT, 1e-2)
    assert np.allclose(x.grad.numpy(), MDCN_INPUT_GRAD, 1e-2)
    assert np.allclose(dcn.weight.grad.numpy(), MDCN_WEIGHT_GRAD, 1e-2)
    # The offsets are all zero (conv_offset starts at 0): every sample point is
    # exactly on a pixel, where only mmcv's derivative rule gives these numbers.
    assert np.allclose(dcn.conv_offset.weight.grad.numpy(), MDCN_OFFSET_WEIGHT_GRAD, 1e-2)
    assert np.allclose(dcn.conv_offset.bias.grad.numpy(), MDCN_OFFSET_BIAS_GRAD, 1e-2)


# -- test_nms_rotated.py ------------------------------------------------------------

ROTATED_DETS = np.array([[6.0, 3.0, 8.0, 7.0, 0.5, 0.7], [3.0, 6.0, 9.0, 11.0, 0.6, 0.8],
                         [3.0, 7.0, 10.0, 12.0, 0.3, 0.5], [1.0, 4.0, 13.0, 7.0, 0.6, 0.9]],
                        dtype=np.float32)
ROTATED_EXPECTED = np.array([[1.0, 4.0, 13.0, 7.0, 0.6], [3.0, 6.0, 9.0, 11.0, 0.6],
                             [6.0, 3.0, 8.0, 7.0, 0.5]], dtype=np.float32)


@pytest.mark.parametrize("labels", [None, [1.0, 0.0, 1.0, 0.0]])
def test_nms_rotated(ops, labels):
    boxes = torch.from_numpy(ROTATED_DETS.copy())
    label_tensor = None if labels is None else torch.tensor(labels)
    dets, keep = ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, label_tensor)
    assert np.allclose(dets.numpy()[:, :5], ROTATED_EXPECTED)
    assert keep.tolist() == [3, 1, 0]
    # counter-clockwise angle definition
    boxes[..., -2] *= -1
    dets, keep = ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, label_tensor,
                                 clockwise=False)
    dets[..., -2] *= -1
    assert np.allclose(dets.numpy()[:, :5], ROTATED_EXPECTED)
    assert keep.tolist() == [3, 1, 0]


# -- test_box_iou_rotated.py -----------------------------------------------------------

IOU_BOXES1 = [[1.0, 1.0, 3.0, 4.0, 0.5], [2.0, 2.0, 3.0, 4.0, 0.6], [7.0, 7.0, 8.0, 8.0, 0.4]]
IOU_BOXES2 = [[0.0, 2.0, 2.0, 5.0, 0.3], [2.0, 1.0, 3.0, 3.0, 0.5], [5.0, 5.0, 6.0, 7.0, 0.4]]
IOU_EXPECTED = {
    "iou": ([[0.3708, 0.4351, 0.0000], [0.1104, 0.4487, 0.0424], [0.0000, 0.0000, 0.3622]],
            [0.3708, 0.4487, 0.3622]),
    "iof": ([[0.4959, 0.5306, 0.0000], [0.1823, 0.5420, 0.1832], [0.0000, 0.0000, 0.4404]],
            [0.4959, 0.5420, 0.4404]),
}


@pytest.mark.parametrize("mode", ["iou", "iof"])
def test_box_iou_rotated_cpu(ops, mode):
    expected, expected_aligned = IOU_EXPECTED[mode]
    boxes1, boxes2 = torch.tensor(IOU_BOXES1), torch.tensor(IOU_BOXES2)
    for clockwise in (True, False):
        if not clockwise:
            boxes1[..., -1] *= -1
            boxes2[..., -1] *= -1
        ious = ops.box_iou_rotated(boxes1, boxes2, mode=mode, clockwise=clockwise)
        assert np.allclose(ious.numpy(), expected, atol=1e-4)
        ious = ops.box_iou_rotated(boxes1, boxes2, mode=mode, aligned=True,
                                   clockwise=clockwise)
        assert np.allclose(ious.numpy(), expected_aligned, atol=1e-4)


# -- test_ms_deformable_attn.py ---------------------------------------------------------


# mmcv's own bounds: the double case compares with allclose's defaults.
@pytest.mark.parametrize("dtype, rtol, atol, max_abs, max_rel", [
    (torch.double, 1e-5, 1e-8, 1e-18, 1e-15),
    (torch.float, 1e-2, 1e-3, 1e-9, 1e-6)])
def test_msda_forward_equal_with_pytorch(ops, dtype, rtol, atol, max_abs, max_rel):
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction,
        multi_scale_deformable_attn_pytorch,
    )
    torch.manual_seed(3)
    n, m, channels, queries, points = 1, 2, 2, 2, 2
    shapes = torch.as_tensor([(6, 4), (3, 2)], dtype=torch.long)
    level_start_index = torch.cat((shapes.new_zeros((1, )), shapes.prod(1).cumsum(0)[:-1]))
    s = int(sum(h * w for h, w in shapes.tolist()))
    value = torch.rand(n, s, m, channels).to(dtype) * 0.01
    sampling_locations = torch.rand(n, queries, m, 2, points, 2).to(dtype)
    attention_weights = torch.rand(n, queries, m, 2, points).to(dtype) + 1e-5
    attention_weights /= attention_weights.sum(-1, keepdim=True).sum(-2, keepdim=True)
    expected = multi_scale_deformable_attn_pytorch(value, shapes, sampling_locations,
                                                   attention_weights).detach()
    got = MultiScaleDeformableAttnFunction.apply(value, shapes, level_start_index,
                                                 sampling_locations, attention_weights,
                                                 2).detach()
    assert torch.allclose(got, expected, rtol=rtol, atol=atol)
    max_abs_err = (got - expected).abs().max()
    max_rel_err = ((got - expected).abs() / expected.abs()).max()
    assert max_abs_err < max_abs
    assert max_rel_err < max_rel


# -- test_voxelization.py ----------------------------------------------------------------
#
# mmcv reads 800 recorded lidar points (x, y, z, intensity; float32, three
# decimals) from tests/data/for_3d_ops/test_voxel.npy. The same kind of cloud
# is drawn here with a fixed seed: points in small clusters (surfaces hit by
# several beams, so a 0.5 m voxel holds up to a few dozen points) ahead of the
# car, x 11.5-72 m, y -16-14 m, z mostly 0.55-1 m, intensity 0-0.64; a few
# points fall outside point_cloud_range (x >= 70.4 m or z >= 1 m) and must be
# dropped. The expected voxels come from the rule mmcv's deterministic kernel
# implements, written out as a plain loop (the data file stored its output).

VOXEL_SIZE = [0.5, 0.5, 0.5]
POINT_CLOUD_RANGE = [0, -40, -3, 70.4, 40, 1]


def lidar_like_points(seed: int = 2, count: int = 800, clusters: int = 45) -> np.ndarray:
    """(count, 4) float32 points with x, y, z, intensity in the data file's ranges."""
    rng = np.random.default_rng(seed)
    centres = np.stack([rng.uniform(11.6, 72.0, clusters), rng.uniform(-16.1, 14.0, clusters),
                        rng.uniform(0.56, 0.95, clusters)], axis=1)
    centres[0, 2] = rng.uniform(1.0, 2.64)  # one cluster above the range's z
    members = rng.choice(clusters, size=count, p=rng.dirichlet(np.ones(clusters)))
    xyz = centres[members] + rng.normal(0.0, [0.15, 0.15, 0.03], size=(count, 3))
    intensity = rng.uniform(0.0, 0.64, size=(count, 1)).round(2)
    return np.concatenate([xyz.round(3), intensity], axis=1).astype(np.float32)


def voxel_of(point: np.ndarray) -> tuple:
    """The (z, y, x) voxel of one point, or None when it is outside the range
    (float32 arithmetic, as the kernel computes on float32 points)."""
    low = np.float32(POINT_CLOUD_RANGE[:3])
    size = np.float32(VOXEL_SIZE)
    grid = np.round((np.float32(POINT_CLOUD_RANGE[3:]) - low) / size).astype(int)
    coordinate = np.floor((point[:3] - low) / size).astype(int)
    if (coordinate < 0).any() or (coordinate >= grid).any():
        return None
    return tuple(int(c) for c in coordinate[::-1])


def expected_hard_voxels(points: np.ndarray, max_points: int, max_voxels: int):
    """Voxels numbered by first point, at most ``max_voxels`` of them and the first
    ``max_points`` points of each: (voxels, coors, num_points_per_voxel)."""
    slot_of: dict = {}
    members: list = []
    for point in points:
        voxel = voxel_of(point)
        if voxel is None or (voxel not in slot_of and len(slot_of) >= max_voxels):
            continue
        if voxel not in slot_of:
            slot_of[voxel] = len(slot_of)
            members.append([])
        if len(members[slot_of[voxel]]) < max_points:
            members[slot_of[voxel]].append(point)
    voxels = np.zeros((len(members), max_points, points.shape[1]), dtype=np.float32)
    for index, voxel_points in enumerate(members):
        voxels[index, :len(voxel_points)] = voxel_points
    return voxels, np.array(list(slot_of), dtype=np.int32).reshape(-1, 3), np.array(
        [len(m) for m in members], dtype=np.int32)


def points_of_voxel(coors: np.ndarray, voxel: np.ndarray) -> np.ndarray:
    """Mask of the points whose dynamic coordinate is ``voxel`` (mmcv's
    ``_get_voxel_points_indices``)."""
    return (coors == voxel).all(axis=1)


def test_voxelization_points_resemble_the_data_file():
    points = lidar_like_points()
    in_range = [voxel_of(p) is not None for p in points]
    _, _, counts = expected_hard_voxels(points, 1000, 20000)
    assert points.shape == (800, 4) and points.dtype == np.float32
    assert 10 <= len(points) - sum(in_range) <= 60  # the file drops 20 of 800
    assert 60 <= len(counts) <= 200 and counts.max() >= 15  # the file: 103 voxels, up to 24


def test_voxelization(ops):
    points = torch.from_numpy(lidar_like_points())
    dynamic_voxelization = ops.Voxelization(VOXEL_SIZE, POINT_CLOUD_RANGE, -1)
    hard_voxelization = ops.Voxelization(VOXEL_SIZE, POINT_CLOUD_RANGE, 1000)
    expected_voxels, expected_coors, expected_counts = expected_hard_voxels(
        points.numpy(), 1000, 20000)

    voxels, coors, counts = hard_voxelization(points.contiguous())
    assert np.array_equal(voxels.numpy(), expected_voxels)
    assert np.array_equal(coors.numpy(), expected_coors)
    assert np.array_equal(counts.numpy(), expected_counts)

    dynamic_coors = dynamic_voxelization(points).numpy()
    for index in range(expected_coors.shape[0]):
        inside = points_of_voxel(dynamic_coors, expected_coors[index])
        count = int(inside.sum())
        assert count > 0
        assert np.array_equal(points.numpy()[inside], expected_voxels[index][:count])
        assert count == expected_counts[index]
    # Every point outside the range, and only those, gets -1 coordinates.
    outside = np.array([voxel_of(p) is None for p in points.numpy()])
    assert outside.any()
    assert ((dynamic_coors == -1).all(axis=1) == outside).all()
    assert (dynamic_coors[~outside] >= 0).all()


@pytest.mark.parametrize("deterministic", [True, False])
def test_voxelization_capped(ops, deterministic):
    """mmcv's ``test_voxelization_nondeterministic`` (CUDA only there): with at most
    10 points per voxel and 50 voxels, every voxel is a distinct voxel of the
    dynamic coordinates, holding distinct points of it, all of them when fewer
    than 10, zero padded."""
    max_points, max_voxels = 10, 50
    points = torch.from_numpy(lidar_like_points())
    dynamic_voxelization = ops.Voxelization(VOXEL_SIZE, POINT_CLOUD_RANGE, -1)
    hard_voxelization = ops.Voxelization(VOXEL_SIZE, POINT_CLOUD_RANGE, max_points,
                                         max_voxels, deterministic=deterministic)

    voxels, coors, counts = hard_voxelization(points.contiguous())
    coors_list = coors.tolist()
    coors_all = dynamic_voxelization(points).tolist()
    coors_set = {tuple(c) for c in coors_list}
    assert len(coors_set) == len(coors_list) == max_voxels
    assert not coors_set - {tuple(c) for c in coors_all}
    points_of: dict = {}
    for coordinate, point in zip(coors_all, points.tolist()):
        points_of.setdefault(tuple(coordinate), set()).add(tuple(point))
    full = 0
    for coordinate, voxel_points, count in zip(coors_list, voxels.tolist(), counts.tolist()):
        held = {tuple(p) for p in voxel_points[:count]}
        assert len(held) == count
        if count < max_points:
            assert held == points_of[tuple(coordinate)]
            assert all(max(p) == min(p) == 0 for p in voxel_points[count:])
        else:
            full += 1
            assert held <= points_of[tuple(coordinate)]
    assert full > 0  # the cap was exercised

    # All input points in range: as many voxels as distinct coordinates.
    first = points[:max_voxels]
    first_coors = dynamic_voxelization(first)
    valid = first_coors.ge(0).all(-1)
    voxels, coors, counts = hard_voxelization(first[valid].contiguous())
    assert len({tuple(c) for c in coors.tolist()}) == coors.shape[0] == len(
        {tuple(c) for c in first_coors[valid].tolist()})
