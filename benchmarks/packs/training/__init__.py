"""Benchmarks of the training pack (registry/training): the tracker and tracing."""
