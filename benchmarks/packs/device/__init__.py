"""Benchmarks of the device pack (registry/device)."""
