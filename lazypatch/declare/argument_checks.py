"""The checks of a registration's arguments in their uncommon forms, and what a patch
function's signature says (``fn(module)`` or ``fn(module, patch)``).

``registration.register`` answers the common forms itself (a plain function, a name
given, an integer priority, a phase constant) and calls these only for the others,
so that activation, whose built-in patches are all in the common forms, does not load
them (benchmarks/COSTS.md): a bad argument still fails here, at the decorator line.
"""

from ..state import AFTER, BEFORE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Tuple


# Code flags (Include/cpython/code.h) of functions whose call does not run their body.
_DEFERRED_BODY_FLAGS = {0x20: "a generator function", 0x80: "a coroutine function (async def)",
                        0x100: "an iterable coroutine", 0x200: "an async generator function"}


def validate_priority(priority: object, name: str) -> int:
    """An integer priority; integral floats (``2.0``) are accepted as that integer."""
    if priority.__class__ is int:
        return priority
    if isinstance(priority, bool) or not isinstance(priority, (int, float)):
        raise TypeError(f"patch {name!r}: priority must be an integer (lower runs first), "
                        f"got {priority!r}")
    if isinstance(priority, float):
        # NaN compares false with everything and would corrupt the order of
        # every other patch on the target; inf is not a position either.
        if priority != priority or priority in (float("inf"), float("-inf")) \
                or not priority.is_integer():
            raise ValueError(f"patch {name!r}: priority must be a finite integer such as 0, "
                             f"-10 or 10 (lower runs first), got {priority!r}")
        return int(priority)
    return priority


def _code_of(function: "Any") -> "Any":
    """The code object a call of ``function`` runs, through partials and callable objects."""
    seen = 0
    while seen < 10:
        seen += 1
        code = getattr(function, "__code__", None)
        if code is not None:
            return code
        inner = getattr(function, "func", None)          # functools.partial
        if inner is None and not isinstance(function, type):
            call = getattr(type(function), "__call__", None)  # noqa: B004 - the method itself
            inner = getattr(call, "__func__", call) if call is not None else None
            if inner is not None and getattr(inner, "__code__", None) is None:
                return None
        if inner is None or inner is function:
            return None
        function = inner
    return None


def _count_positional_parameters(function: "Callable[..., Any]") -> "Tuple[int, int, bool]":
    """(required, maximum, has *args) for a callable, cheaply.

    ``inspect.signature`` pulls in a large import graph; for plain functions
    the code object answers the same question.
    """
    # A bound method forwards __code__ to its function, whose first parameter
    # (self) is already supplied: count it out.
    bound_self = 1 if getattr(function, "__self__", None) is not None and \
        hasattr(function, "__func__") else 0
    code = getattr(function, "__code__", None)
    if code is None:
        import inspect
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return (0, 2, True)
        positional = [p for p in parameters
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = sum(1 for p in positional if p.default is p.empty)
        varargs = any(p.kind == p.VAR_POSITIONAL for p in parameters)
        return (required, len(positional), varargs)
    count = code.co_argcount - bound_self
    defaults = getattr(function, "__defaults__", None) or ()
    varargs = bool(code.co_flags & 0x04)
    return (count - len(defaults), count, varargs)


def takes_context(function: "Callable[..., Any]", name: str) -> bool:
    """True if ``function`` is called as ``fn(module, patch)``, False for ``fn(module)``.

    Raises TypeError naming the patch when it can be called neither way, or
    when calling it would not run its body (coroutine and generator functions).
    """
    if not callable(function):
        raise TypeError(f"patch {name!r}: {function!r} is not callable; decorate a "
                        f"function taking (module) or (module, patch)")
    code = _code_of(function)
    if code is not None:
        for flag, kind in _DEFERRED_BODY_FLAGS.items():
            if code.co_flags & flag:
                raise TypeError(f"patch {name!r}: {getattr(function, '__qualname__', function)!r} "
                                f"is {kind}; calling it does not run its body, so the patch "
                                f"would never take effect. Write a plain def taking "
                                f"(module) or (module, patch)")
    required, maximum, varargs = _count_positional_parameters(function)
    if required <= 2 and (maximum >= 2 or varargs):
        return True
    if required <= 1 and maximum >= 1:
        return False
    raise TypeError(f"patch {name!r}: function {getattr(function, '__qualname__', function)!r} "
                    f"must accept (module) or (module, patch); it takes "
                    f"{required} required positional argument(s)")


def default_name(function: "Any") -> str:
    module_name = getattr(function, "__module__", None) or "__main__"
    qualified = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module_name}.{qualified}"


def checked_phase(phase: object) -> str:
    """The phase constant itself, not an equal string: run_body compares by identity."""
    if phase not in (AFTER, BEFORE):
        raise ValueError(f"phase must be {AFTER!r} or {BEFORE!r}, got {phase!r}")
    return BEFORE if phase == BEFORE else AFTER


def checked_name(name: object, function: "Any") -> str:
    """The patch's name: the function's qualified name when none is given."""
    if name is None:
        return default_name(function)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"patch name must be a non-empty string, got {name!r}")
    return name


def checked_arguments(function: "Any", phase: object, name: object, priority: object
                      ) -> "Tuple[str, str, int]":
    """(phase, name, priority) as ``register`` keeps them; raises naming the problem."""
    phase = checked_phase(phase)   # in register's order: the phase's error first
    checked = checked_name(name, function)
    return phase, checked, validate_priority(priority, checked)
