"""``import lazypatch.auto`` as the first line of a script activates lazypatch.

It reads the LAZYPATCH_* configuration, installs the import finder and
registers the built-in packs, importing none of their targets.
"""

from .activate.activation import activate

activate("import lazypatch.auto")
