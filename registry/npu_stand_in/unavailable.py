"""Operators the stand-in names but has no kernel for: importable, raising when called.

``from torch_npu import npu_foo`` and ``from mx_driving import SparseConv3d`` must not
stop a model file at import (most files import far more operators than one run calls);
the call is where the program really needs the kernel, so that is where it fails, with
an error naming the operator and the ways out. Standard library only.
"""

from __future__ import annotations

from . import ledger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class UnavailableOperator:
    """A named operator with no kernel here; calling it (or instantiating it, for a
    class such as ``mx_driving.SparseConv3d``) raises ``NotImplementedError``."""

    def __init__(self, qualified_name: str) -> None:
        self.qualified_name = qualified_name
        self.__name__ = self.__qualname__ = qualified_name.rpartition(".")[2]
        self.__module__ = qualified_name.rpartition(".")[0]
        self.__doc__ = f"{qualified_name}: no kernel in lazypatch's NPU stand-in (raises)."

    def __call__(self, *args: "Any", **kwargs: "Any") -> "Any":
        ledger.raised(self.qualified_name)
        package = self.qualified_name.partition(".")[0]
        raise NotImplementedError(
            f"{self.qualified_name} has no kernel in lazypatch's NPU stand-in (pack "
            f"'npu_stand_in': {package} is not installed, and the stand-in provides only the "
            f"operators it can compute). Run on an Ascend host with {package} installed, "
            f"or replace this call with a PyTorch formulation.")

    def __getattr__(self, name: str) -> "Any":
        # ``Function.apply`` and similar: the same operator, the same error at call time.
        if name.startswith("__"):
            raise AttributeError(name)
        return UnavailableOperator(f"{self.qualified_name}.{name}")

    def __repr__(self) -> str:
        return f"<unavailable operator {self.qualified_name} (lazypatch NPU stand-in)>"
