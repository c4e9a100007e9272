"""Measurements of the apply stage: the wrapper's per-call cost and call tracking."""
