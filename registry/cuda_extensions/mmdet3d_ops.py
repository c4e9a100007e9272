"""mmdetection3d 0.17's own compiled op modules (``mmdet3d.ops.ball_query.ball_query_ext``
and the others its ``setup.py`` builds; also in its forks: BEVDet's, MapTR's vendored
0.17.2) on the pure-PyTorch kernels of the OpenMMLab pack's ``mmcv._ext``.

mmcv 1.x took these kernels over from mmdetection3d 0.x with the same arithmetic; what
changed is the calling convention: 0.17 passes the sizes first (``ball_query_wrapper(b,
n, m, min_radius, max_radius, nsample, new_xyz, xyz, idx)``), mmcv the tensors first and
the sizes by keyword. Each function here is one 0.17 binding that reorders its arguments
for the mmcv kernel, with two exceptions written out: ``iou3d_cuda`` took boxes as (x1,
y1, x2, y2, ry) where mmcv 2's kernels take (x, y, z, dx, dy, dz, ry), and its
``boxes_iou_bev_gpu`` gives IoUs where mmcv's kernel gives overlap areas.
"""
from __future__ import annotations

from typing import List

import torch

from ..shared.mmcv_ext import assign_score, iou3d, points, points_in_boxes, roiaware_pool3d, sparse_conv

# --- ball_query_ext, knn_ext, group_points_ext, interpolate_ext, gather_points_ext,
# --- furthest_point_sample_ext


def ball_query_wrapper(b: int, n: int, m: int, min_radius: float, max_radius: float,
                       nsample: int, new_xyz: torch.Tensor, xyz: torch.Tensor,
                       idx: torch.Tensor) -> int:
    """``ball_query_ext.ball_query_wrapper``: fills ``idx`` (b, m, nsample)."""
    points.ball_query_forward(new_xyz, xyz, idx, b=b, n=n, m=m, min_radius=min_radius,
                              max_radius=max_radius, nsample=nsample)
    return 1


def knn_wrapper(b: int, n: int, m: int, nsample: int, xyz: torch.Tensor,
                new_xyz: torch.Tensor, idx: torch.Tensor, dist2: torch.Tensor) -> None:
    """``knn_ext.knn_wrapper``: fills ``idx`` and ``dist2`` (b, m, nsample)."""
    points.knn_forward(xyz, new_xyz, idx, dist2, b=b, n=n, m=m, nsample=nsample)


def group_points_wrapper(b: int, c: int, n: int, npoints: int, nsample: int,
                         features: torch.Tensor, idx: torch.Tensor, out: torch.Tensor) -> int:
    """``group_points_ext.forward``: fills ``out`` (b, c, npoints, nsample)."""
    points.group_points_forward(features, idx, out, b=b, c=c, n=n, npoints=npoints,
                                nsample=nsample)
    return 1


def group_points_grad_wrapper(b: int, c: int, n: int, npoints: int, nsample: int,
                              grad_out: torch.Tensor, idx: torch.Tensor,
                              grad_features: torch.Tensor) -> int:
    """``group_points_ext.backward``: adds into ``grad_features`` (b, c, n)."""
    points.group_points_backward(grad_out, idx, grad_features, b=b, c=c, n=n, npoints=npoints,
                                 nsample=nsample)
    return 1


def three_nn_wrapper(b: int, n: int, m: int, unknown: torch.Tensor, known: torch.Tensor,
                     dist2: torch.Tensor, idx: torch.Tensor) -> None:
    """``interpolate_ext.three_nn_wrapper``: fills ``dist2`` and ``idx`` (b, n, 3)."""
    points.three_nn_forward(unknown, known, dist2, idx, b=b, n=n, m=m)


def three_interpolate_wrapper(b: int, c: int, m: int, n: int, features: torch.Tensor,
                              idx: torch.Tensor, weight: torch.Tensor,
                              out: torch.Tensor) -> None:
    """``interpolate_ext.three_interpolate_wrapper``: fills ``out`` (b, c, n)."""
    points.three_interpolate_forward(features, idx, weight, out, b=b, c=c, m=m, n=n)


def three_interpolate_grad_wrapper(b: int, c: int, n: int, m: int, grad_out: torch.Tensor,
                                   idx: torch.Tensor, weight: torch.Tensor,
                                   grad_features: torch.Tensor) -> None:
    """``interpolate_ext.three_interpolate_grad_wrapper``: adds into ``grad_features``."""
    points.three_interpolate_backward(grad_out, idx, weight, grad_features, b=b, c=c, n=n,
                                      m=m)


def gather_points_wrapper(b: int, c: int, n: int, npoints: int, features: torch.Tensor,
                          idx: torch.Tensor, out: torch.Tensor) -> int:
    """``gather_points_ext.gather_points_wrapper``: fills ``out`` (b, c, npoints)."""
    points.gather_points_forward(features, idx, out, b=b, c=c, n=n, npoints=npoints)
    return 1


def gather_points_grad_wrapper(b: int, c: int, n: int, npoints: int, grad_out: torch.Tensor,
                               idx: torch.Tensor, grad_features: torch.Tensor) -> int:
    """``gather_points_ext.gather_points_grad_wrapper``: adds into ``grad_features``."""
    points.gather_points_backward(grad_out, idx, grad_features, b=b, c=c, n=n,
                                  npoints=npoints)
    return 1


def furthest_point_sampling_wrapper(b: int, n: int, m: int, xyz: torch.Tensor,
                                    temp: torch.Tensor, idx: torch.Tensor) -> int:
    """``furthest_point_sample_ext.furthest_point_sampling_wrapper``: fills ``idx``."""
    points.furthest_point_sampling_forward(xyz, temp, idx, b=b, n=n, m=m)
    return 1


def furthest_point_sampling_with_dist_wrapper(b: int, n: int, m: int,
                                              distances: torch.Tensor, temp: torch.Tensor,
                                              idx: torch.Tensor) -> int:
    """``furthest_point_sample_ext.furthest_point_sampling_with_dist_wrapper``."""
    points.furthest_point_sampling_with_dist_forward(distances, temp, idx, b=b, n=n, m=m)
    return 1


# --- assign_score_withk_ext (PAConv)

def assign_score_withk_forward_wrapper(B: int, N0: int, N1: int, M: int, K: int,
                                       O: int,  # noqa: E741 (0.17's argument name)
                                       aggregate: int, points_: torch.Tensor,
                                       centers: torch.Tensor, scores: torch.Tensor,
                                       knn_idx: torch.Tensor, output: torch.Tensor) -> None:
    """``assign_score_withk_ext.assign_score_withk_forward_wrapper``: fills ``output``."""
    assign_score.assign_score_withk_forward(points_, centers, scores, knn_idx, output, B=B,
                                            N0=N0, N1=N1, M=M, K=K, O=O, aggregate=aggregate)


def assign_score_withk_backward_wrapper(B: int, N0: int, N1: int, M: int, K: int,
                                        O: int,  # noqa: E741 (0.17's argument name)
                                        aggregate: int, grad_out: torch.Tensor,
                                        points_: torch.Tensor, centers: torch.Tensor,
                                        scores: torch.Tensor, knn_idx: torch.Tensor,
                                        grad_points: torch.Tensor, grad_centers: torch.Tensor,
                                        grad_scores: torch.Tensor) -> None:
    """``assign_score_withk_ext.assign_score_withk_backward_wrapper``."""
    assign_score.assign_score_withk_backward(grad_out, points_, centers, scores, knn_idx,
                                             grad_points, grad_centers, grad_scores, B=B,
                                             N0=N0, N1=N1, M=M, K=K, O=O, aggregate=aggregate)


# --- roiaware_pool3d_ext (same arguments as mmcv's)

def roiaware_pool3d_gpu(rois: torch.Tensor, pts: torch.Tensor, pts_feature: torch.Tensor,
                        argmax: torch.Tensor, pts_idx_of_voxels: torch.Tensor,
                        pooled_features: torch.Tensor, pool_method: int) -> int:
    """``roiaware_pool3d_ext.forward``: fills the pooled features (and argmax)."""
    roiaware_pool3d.roiaware_pool3d_forward(rois, pts, pts_feature, argmax, pts_idx_of_voxels,
                                            pooled_features, pool_method)
    return 1


def roiaware_pool3d_gpu_backward(pts_idx_of_voxels: torch.Tensor, argmax: torch.Tensor,
                                 grad_out: torch.Tensor, grad_in: torch.Tensor,
                                 pool_method: int) -> int:
    """``roiaware_pool3d_ext.backward``: adds into ``grad_in``."""
    roiaware_pool3d.roiaware_pool3d_backward(pts_idx_of_voxels, argmax, grad_out, grad_in,
                                             pool_method)
    return 1


def points_in_boxes_gpu(boxes: torch.Tensor, pts: torch.Tensor,
                        box_idx_of_points: torch.Tensor) -> int:
    """``roiaware_pool3d_ext.points_in_boxes_gpu`` (mmcv: ``points_in_boxes_part``)."""
    points_in_boxes.points_in_boxes_part_forward(boxes, pts, box_idx_of_points)
    return 1


def points_in_boxes_batch(boxes: torch.Tensor, pts: torch.Tensor,
                          box_idx_of_points: torch.Tensor) -> int:
    """``roiaware_pool3d_ext.points_in_boxes_batch`` (mmcv: ``points_in_boxes_all``)."""
    points_in_boxes.points_in_boxes_all_forward(boxes, pts, box_idx_of_points)
    return 1


def points_in_boxes_cpu(boxes: torch.Tensor, pts: torch.Tensor,
                        pts_indices: torch.Tensor) -> int:
    """``roiaware_pool3d_ext.points_in_boxes_cpu``: fills the (boxes, points) mask."""
    points_in_boxes.points_in_boxes_cpu_forward(boxes, pts, pts_indices)
    return 1


# --- iou3d_cuda: (x1, y1, x2, y2, ry) boxes

def _seven_column_boxes(boxes: torch.Tensor) -> torch.Tensor:
    """(x1, y1, x2, y2, ry) -> mmcv 2's (x, y, z, dx, dy, dz, ry): same footprint, same
    rotation about its centre."""
    x1, y1, x2, y2, angle = boxes.unbind(1)
    zeros, ones = torch.zeros_like(x1), torch.ones_like(x1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, zeros, x2 - x1, y2 - y1, ones, angle], 1)


def boxes_overlap_bev_gpu(boxes_a: torch.Tensor, boxes_b: torch.Tensor,
                          ans_overlap: torch.Tensor) -> int:
    """``iou3d_cuda.boxes_overlap_bev_gpu``: fills the pairwise BEV overlap areas."""
    iou3d.iou3d_boxes_overlap_bev_forward(_seven_column_boxes(boxes_a),
                                          _seven_column_boxes(boxes_b), ans_overlap)
    return 1


def boxes_iou_bev_gpu(boxes_a: torch.Tensor, boxes_b: torch.Tensor,
                      ans_iou: torch.Tensor) -> int:
    """``iou3d_cuda.boxes_iou_bev_gpu``: fills the pairwise BEV IoUs (overlap over union,
    the union at least 1e-8, as the kernel divides)."""
    overlap = torch.empty_like(ans_iou)
    boxes_overlap_bev_gpu(boxes_a, boxes_b, overlap)
    area_a = (boxes_a[:, 2] - boxes_a[:, 0]) * (boxes_a[:, 3] - boxes_a[:, 1])
    area_b = (boxes_b[:, 2] - boxes_b[:, 0]) * (boxes_b[:, 3] - boxes_b[:, 1])
    union = (area_a[:, None] + area_b[None, :] - overlap).clamp(min=1e-8)
    ans_iou.copy_(overlap / union)
    return 1


def nms_gpu(boxes: torch.Tensor, keep: torch.Tensor, nms_overlap_thresh: float,
            device_id: "int | None" = None) -> int:
    """``iou3d_cuda.nms_gpu``: rotated NMS of score-sorted boxes; writes the kept indices
    into ``keep`` and returns how many."""
    count = torch.zeros(1, dtype=torch.long)
    iou3d.iou3d_nms3d_forward(_seven_column_boxes(boxes), keep, count, nms_overlap_thresh)
    return int(count)


def nms_normal_gpu(boxes: torch.Tensor, keep: torch.Tensor, nms_overlap_thresh: float,
                   device_id: "int | None" = None) -> int:
    """``iou3d_cuda.nms_normal_gpu``: axis-aligned NMS (the angle ignored)."""
    count = torch.zeros(1, dtype=torch.long)
    iou3d.iou3d_nms3d_normal_forward(_seven_column_boxes(boxes), keep, count,
                                     nms_overlap_thresh)
    return int(count)


# --- sparse_conv_ext (mmcv 1.x took spconv 1 over with the same arguments)

def _indice_pairs(dimensions: int):  # type: ignore[no-untyped-def]
    kernel = getattr(sparse_conv, f"get_indice_pairs_{dimensions}d_forward")

    def get_indice_pairs(indices: torch.Tensor, batch_size: int, out_shape: List[int],
                         spatial_shape: List[int], ksize: List[int], stride: List[int],
                         padding: List[int], dilation: List[int], out_padding: List[int],
                         subm: int, transpose: int) -> List[torch.Tensor]:
        return kernel(indices, batch_size, out_shape, spatial_shape, ksize, stride, padding,
                      dilation, out_padding, subm, transpose)
    get_indice_pairs.__name__ = get_indice_pairs.__qualname__ = \
        f"get_indice_pairs_{dimensions}d"
    get_indice_pairs.__doc__ = (f"``sparse_conv_ext.get_indice_pairs_{dimensions}d`` "
                                f"(mmcv: ``get_indice_pairs_{dimensions}d_forward``).")
    return get_indice_pairs


get_indice_pairs_2d = _indice_pairs(2)
get_indice_pairs_3d = _indice_pairs(3)
get_indice_pairs_4d = _indice_pairs(4)


def indice_conv(features: torch.Tensor, filters: torch.Tensor, indice_pairs: torch.Tensor,
                indice_num: torch.Tensor, num_activate_out: int, inverse: int,
                subm: int) -> torch.Tensor:
    """``sparse_conv_ext.indice_conv_fp32`` / ``_half``."""
    return sparse_conv.indice_conv_forward(features, filters, indice_pairs, indice_num,
                                           num_activate_out, inverse, subm)


def fused_indice_conv(features: torch.Tensor, filters: torch.Tensor, bias: torch.Tensor,
                      indice_pairs: torch.Tensor, indice_num: torch.Tensor,
                      num_activate_out: int, inverse: int, subm: int) -> torch.Tensor:
    """``sparse_conv_ext.fused_indice_conv_fp32`` / ``_half``."""
    return sparse_conv.fused_indice_conv_forward(features, filters, bias, indice_pairs,
                                                 indice_num, num_activate_out, inverse, subm)


def indice_conv_backward(features: torch.Tensor, filters: torch.Tensor,
                         out_backprop: torch.Tensor, indice_pairs: torch.Tensor,
                         indice_num: torch.Tensor, inverse: int,
                         subm: int) -> List[torch.Tensor]:
    """``sparse_conv_ext.indice_conv_backward_fp32`` / ``_half``."""
    return sparse_conv.indice_conv_backward(features, filters, out_backprop, indice_pairs,
                                            indice_num, inverse, subm)


def indice_maxpool(features: torch.Tensor, indice_pairs: torch.Tensor,
                   indice_num: torch.Tensor, num_activate_out: int) -> torch.Tensor:
    """``sparse_conv_ext.indice_maxpool_fp32`` / ``_half``."""
    return sparse_conv.indice_maxpool_forward(features, indice_pairs, indice_num,
                                              num_activate_out)


def indice_maxpool_backward(features: torch.Tensor, out_features: torch.Tensor,
                            out_grad: torch.Tensor, indice_pairs: torch.Tensor,
                            indice_num: torch.Tensor) -> torch.Tensor:
    """``sparse_conv_ext.indice_maxpool_backward_fp32`` / ``_half``."""
    return sparse_conv.indice_maxpool_backward(features, out_features, out_grad, indice_pairs,
                                               indice_num)
