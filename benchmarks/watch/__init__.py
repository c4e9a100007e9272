"""Measurements of the watch stage: unwatched and watched imports, `import torch`."""
