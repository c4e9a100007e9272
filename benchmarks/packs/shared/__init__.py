"""Benchmarks of the kernels the packs share (registry/shared): the pure-PyTorch mmcv._ext."""
