"""NumPy compatibility pack: the aliases NumPy 1.20-2.x removed, for legacy code.

Code written for older NumPy says ``np.float``, ``np.in1d``, ``np.NaN``...;
on NumPy 2.x each is an ``AttributeError``. This pack brings them back, but
only the ones the running NumPy lacks (``np.bool`` and ``np.long`` exist
again in NumPy 2 and are never touched), and each one warns once, on first
use, with a ``DeprecationWarning`` naming the modern spelling.

How: NumPy defines a module-level ``__getattr__`` that raises for expired
names. ``numpy_compat.attribute_hook`` wraps it with a function that first
looks the name up in a table of restored aliases and otherwise defers to
NumPy's own. The three alias patches (``type_aliases``, ``function_aliases``,
``constant_aliases``) only fill that table, each with its own entries, so any
of them can be disabled (``LAZYPATCH_DISABLE=numpy_compat.function_aliases``)
or undone exactly without touching the others. Nothing is written into the
``numpy`` namespace, so ``dir(numpy)`` and ``hasattr`` on names NumPy defines
are unchanged.

This file only declares patches; :mod:`.aliases` and :mod:`.hook` (which
need numpy) are imported when numpy is.
"""

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "numpy_compat"
TAGS = (PACK, "compat", "numpy")
OPT_IN = False
TARGETS = ("numpy",)
REQUIRES = ()

import lazypatch


@lazypatch.when_imported("numpy", name=f"{PACK}.attribute_hook", priority=-10, tags=TAGS)
def attribute_hook(numpy, patch):
    """Route attribute misses on numpy through the table of restored aliases."""
    from .hook import install_hook
    install_hook(numpy, patch)


@lazypatch.when_imported("numpy", name=f"{PACK}.type_aliases", tags=TAGS)
def type_aliases(numpy, patch):
    """Restore np.float, np.int, np.float_, np.bool8, np.sctypes... where NumPy lacks them."""
    from .aliases import TYPE_ALIASES
    from .hook import restore
    restore(numpy, patch, TYPE_ALIASES)


@lazypatch.when_imported("numpy", name=f"{PACK}.function_aliases", tags=TAGS)
def function_aliases(numpy, patch):
    """Restore np.in1d, np.trapz, np.product, np.cast, np.deprecate... where NumPy lacks them."""
    from .aliases import FUNCTION_ALIASES
    from .hook import restore
    restore(numpy, patch, FUNCTION_ALIASES)


@lazypatch.when_imported("numpy", name=f"{PACK}.constant_aliases", tags=TAGS)
def constant_aliases(numpy, patch):
    """Restore np.NaN, np.Inf, np.NINF, np.PZERO... where NumPy lacks them."""
    from .aliases import CONSTANT_ALIASES
    from .hook import restore
    restore(numpy, patch, CONSTANT_ALIASES)
