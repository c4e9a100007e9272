"""DrivingSDK 2.0's import controls as lazypatch boundaries: inert stubs for
``skip_import``, ``replace_with.module`` for ``replace_import``, and the patch behind
``inject_import``; see ``v2.patcher``."""

from __future__ import annotations

from types import ModuleType

from ...declare.boundaries import resolve
from ...declare.registration import validate_target

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional


class Stub:
    """What a skipped module hands out: any attribute is a stub, a call returns None."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> "Stub":
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._name}.{name}")

    def __call__(self, *args: "Any", **kwargs: "Any") -> None:
        return None

    def __iter__(self) -> "Any":
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: "Any") -> bool:
        return False

    def __repr__(self) -> str:
        return f"<Stub {self._name!r} (driving_sdk skip_import)>"


class StubModule(ModuleType):
    """The class of a skipped module (``skip_import``): empty when iterated, measured,
    searched or tested, as DrivingSDK's stub module is, so that code probing it
    (``for name in module``, ``if module:``, ``len(module.__all__)``) takes the
    "nothing here" path."""

    def __iter__(self) -> "Any":
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: "Any") -> bool:
        return False

    def __bool__(self) -> bool:
        return False

    def __call__(self, *args: "Any", **kwargs: "Any") -> None:
        # DrivingSDK's stub module is callable (code calling a skipped module's
        # factory gets None), like the stubs its attributes hand out.
        return None

    def __repr__(self) -> str:
        # "Stub" in the text, as DrivingSDK's repr has it: logs grepped for it keep working.
        return f"<StubModule {self.__name__!r} (driving_sdk skip_import)>"


def stub_getattr(name: str) -> "Any":
    """A skipped module's ``__getattr__`` (PEP 562): private names stay missing, so that
    tools probing modules (pickle, inspect) are not misled."""
    if name.startswith("_"):
        raise AttributeError(name)
    return Stub(name)


class ImportReplacementSpec:
    """What ``replace_with.module(...)`` returns: a module built when it is imported."""

    def __init__(self, base_module: "Optional[str]", exports: "Dict[str, Any]") -> None:
        if base_module is not None:
            validate_target(base_module)
        self.base_module = base_module
        self.exports = dict(exports)

    def build(self, module_path: str) -> ModuleType:
        module = ModuleType(module_path)
        if self.base_module is not None:
            # A snapshot of the base module's public names, as DrivingSDK makes it.
            base = resolve(self.base_module)
            module.__dict__.update({key: value for key, value in vars(base).items()
                                    if not key.startswith("__")})
        module.__dict__.update(self.exports)
        return module


class _ReplaceWith:
    @staticmethod
    def module(base: "Optional[str]" = None, **exports: "Any") -> ImportReplacementSpec:
        """A replacement module: a copy of ``base``'s names (if given) plus ``exports``."""
        return ImportReplacementSpec(base, exports)


replace_with = _ReplaceWith()


def inject_function(source: str, name: str) -> "Callable[[Any, Any], None]":
    def inject_import(module: "Any", patch: "Any") -> None:
        if name in vars(module):
            patch.skip(f"{module.__name__}.{name} exists already; left as it is")
        patch.setattr(module, name, resolve(f"{source}:{name}"))
        exported = vars(module).get("__all__")
        if isinstance(exported, (list, tuple)) and name not in exported:
            patch.setattr(module, "__all__", type(exported)(list(exported) + [name]))
    inject_import.__doc__ = f"from {source} import {name}, made available in the target"
    return inject_import


__all__ = ["Stub", "StubModule", "stub_getattr", "replace_with", "ImportReplacementSpec", "inject_function"]
