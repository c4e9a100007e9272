"""Exceptions and warnings that lazypatch raises or emits.

Kept in a module of its own with no imports so that every other part of the
engine (and user code catching these) can import it without cost.
"""


class PatchError(ImportError):
    """A patch failed while lazypatch runs in strict mode.

    It subclasses ImportError because it is raised from inside the import of
    the patch's target: code that already guards optional imports with
    ``except ImportError`` keeps working.
    """

    def __init__(self, message: str, *, patch_name: str = "", target: str = "") -> None:
        super().__init__(message, name=target or None)
        self.patch_name = patch_name
        self.target = target


class LatePatchWarning(UserWarning):
    """A patch was applied to a module imported before lazypatch saw it, or a stand-in
    was undone after other modules had bound it.

    Other modules may still hold the original objects (``from x import y``
    copies them), or the stand-in; the warning names those modules.
    """


class PatchConflictWarning(UserWarning):
    """Two patches replaced the same attribute or item; the later one wins."""


class PatchFailedWarning(UserWarning):
    """A patch raised; its changes were rolled back and the import went on."""


class NewAttributeWarning(UserWarning):
    """``patch.setattr`` created an attribute the object did not have, and one with a
    nearby name exists: most likely a typo (``new=True`` says the name is meant to be new)."""


class ConfigurationWarning(UserWarning):
    """An environment variable or configuration value was not understood.

    lazypatch falls back to its default for that value and keeps going: bad
    configuration must never break the user's program.
    """


class SkipPatch(Exception):
    """Raised by ``patch.skip(reason)``: the patch decided it does not apply here.

    Caught by the dispatcher, which rolls back any changes and reports the
    patch as ``skipped`` with ``reason``; it never reaches the user's import.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UndoError(RuntimeError):
    """Undo could not restore everything; ``failures`` names each change that failed.

    Raised once, after every other change was undone: one failing undo never
    leaves the rest of a patch (or of ``unpatch_all``) applied.
    """

    def __init__(self, message: str, *, failures: "list" = ()) -> None:  # type: ignore[assignment]
        super().__init__(message)
        self.failures = list(failures)
