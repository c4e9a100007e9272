"""``export.stop_if_static``: stop at the line that makes a dynamic dimension static.

torch records a specialisation as a replacement of the dimension's symbol by a
number (``ShapeEnv._set_replacement``) and reports the violated constraint only once
tracing is over, far from the code that caused it. Wrapping that method, the error
is raised at the moment of the replacement, inside the user's frame, while the
export is still running their code.
"""

from __future__ import annotations

from typing import Any


class DimensionBecameStatic(RuntimeError):
    """A dimension declared dynamic was specialised to a constant by the code in the traceback."""


def install(module: Any, patch: Any) -> None:
    shape_env = getattr(module, "ShapeEnv", None)
    if shape_env is None or "_set_replacement" not in vars(shape_env):
        patch.skip(f"{module.__name__}.ShapeEnv._set_replacement is not there in this torch")

    def check(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        result = wrapped(*args, **kwargs)
        values = dict(zip(("a", "tgt"), args), **kwargs)
        symbol, target = values.get("a"), values.get("tgt")
        if getattr(target, "is_number", False) and instance.replacements.get(symbol) == target:
            sources = instance.var_to_sources.get(symbol) or []
            if sources:
                names = ", ".join(_describe(source) for source in sources)
                raise DimensionBecameStatic(
                    f"{names} was declared dynamic but the code in this traceback makes it "
                    f"the constant {target}; mark it static, or change the line that "
                    f"specialises it")
        return result

    patch.wrap(shape_env, "_set_replacement", check)


def _describe(source: Any) -> str:
    """``L['x'].size()[0]`` for a torch Source (``name`` is a method or a property)."""
    name = getattr(source, "name", None)
    if callable(name):
        name = name()
    return name if isinstance(name, str) else str(source)
