"""Benchmarks of the cuda_extensions pack's stand-ins: bev_pool, deformable aggregation,
spconv, torchvision's operators."""
