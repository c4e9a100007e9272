"""Benchmarks of the export pack (registry/export)."""
