"""Measurements of declaring at scale: 10 to 100,000 registered patches."""
