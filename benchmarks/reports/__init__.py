"""Measurements of the reports stage: merging many processes' report files."""
