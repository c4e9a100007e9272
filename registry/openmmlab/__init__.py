"""Patches for OpenMMLab packages (mmcv, mmdet, mmdet3d)."""
