"""Measurements of the activate stage: what `import lazypatch.auto` costs, lazy against eager."""
