"""What the NPU stand-in did in this process: operators provided, operators that raised.

The report's notes read this (``lines``), so ``lazypatch report`` says that the stand-in
ran: which ``torch_npu``/``mx_driving`` operators it put in place, and which ones a
program called that it has no kernel for. Standard library only: the pack's declarations
import it.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List

_LOCK = threading.Lock()
#: Operators a stand-in module carries with a kernel, in the order they were provided.
PROVIDED: "List[str]" = []
#: Operator -> calls that raised because the stand-in has no kernel for it.
RAISED: "Dict[str, int]" = {}


def provided(names: "List[str]") -> None:
    """Remember that these operators were put in place with a kernel."""
    with _LOCK:
        PROVIDED.extend(name for name in names if name not in PROVIDED)


def raised(name: str) -> None:
    """Count one call of an operator the stand-in has no kernel for."""
    with _LOCK:
        RAISED[name] = RAISED.get(name, 0) + 1


def lines() -> "List[str]":
    """Report lines: the operators that raised, with their call counts."""
    with _LOCK:
        return [f"{name}: called {count} time(s) and raised (no kernel in the stand-in)"
                for name, count in sorted(RAISED.items())]
