"""Edited versions of installed functions, derived from their own source.

A change in the middle of a function (a call no wrapper can reach) used to be a copy
of one upstream release's function, installed only where the installed source hashed
the same. Here the patch reads the *installed* function's source, edits its syntax
tree, and compiles the result in the function's own module: it fits every release
whose source has the shape the edit needs, whatever the version string says, and
keeps whatever else that release does. A source without that shape is left alone,
and the reason names what is missing.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import FunctionType
from typing import Any, Callable, Dict, Optional, Tuple

#: Names the compiled function reaches our helpers by (a closure: nothing is added
#: to the upstream module's namespace). The prefix keeps them apart from its names.
HELPER_PREFIX = "_lazypatch_"

#: An edit: changes the parsed function in place and returns "" when it did, or why not.
Edit = Callable[[ast.FunctionDef], str]


def installed(owner: Any, name: str) -> Tuple[Optional[FunctionType], str]:
    """(the plain function stored as ``owner.name``, "") or (None, why it cannot be edited).

    Read from the owner's own namespace, so a wrapper another patch installed is seen
    for what it is: its source (``inspect`` follows ``__wrapped__``) is not its code.
    """
    where = f"{getattr(owner, '__name__', owner)}.{name}"
    current = vars(owner).get(name) if hasattr(owner, "__dict__") else None
    if current is None:
        return None, f"{where} is not defined there"
    if getattr(current, "__wrapped__", None) is not None:
        return None, (f"{where} is already wrapped by {getattr(current, '__module__', '?')}."
                      f"{getattr(current, '__qualname__', '?')}; editing its source would "
                      f"discard that wrapper")
    function = getattr(current, "__func__", current)   # classmethod / staticmethod
    if not isinstance(function, FunctionType):
        return None, f"{where} is not a Python function ({type(function).__name__})"
    if function.__code__.co_freevars:
        # Recompiled at module level it would lose those cells (zero-argument super()
        # reads __class__ from one).
        return None, (f"{where} uses names of an enclosing scope "
                      f"({', '.join(function.__code__.co_freevars)})")
    return function, ""


def edited(function: FunctionType, edit: Edit,
           helpers: "Optional[Dict[str, Any]]" = None) -> Tuple[Optional[FunctionType], str]:
    """(``function`` recompiled after ``edit`` changed its syntax tree, "") or (None, why not).

    ``helpers`` are the objects the edited code calls, by their names (each starting
    with ``HELPER_PREFIX``); every other name resolves in the function's own module,
    as the original's do.
    """
    helpers = dict(helpers or {})
    try:
        lines, first_line = inspect.getsourcelines(function)
    except (OSError, TypeError) as error:
        return None, f"its source cannot be read ({error})"
    tree = ast.parse(textwrap.dedent("".join(lines)))
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef):
        return None, "it is not a plain function"
    clashing = sorted(node.id for node in ast.walk(definition)
                      if isinstance(node, ast.Name) and node.id.startswith(HELPER_PREFIX))
    if clashing:
        return None, f"its source already uses the name {clashing[0]}"
    definition.decorator_list = []
    why_not = edit(definition)
    if why_not:
        return None, why_not
    # def _lazypatch_factory(<helpers>): <the edited def>; return <its name>
    factory = ast.FunctionDef(
        name=f"{HELPER_PREFIX}factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=name) for name in helpers],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[definition, ast.Return(value=ast.Name(id=definition.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, first_line - 1)    # tracebacks point at the installed file
    code = compile(module, inspect.getsourcefile(function) or f"<{function.__qualname__}>",
                   "exec")
    namespace: Dict[str, Any] = {}
    exec(code, function.__globals__, namespace)   # the module's own names, read live
    rebuilt = namespace[factory.name](*helpers.values())
    rebuilt.__qualname__ = function.__qualname__
    rebuilt.__doc__ = function.__doc__
    rebuilt.__defaults__ = function.__defaults__
    rebuilt.__kwdefaults__ = function.__kwdefaults__
    rebuilt.__wrapped__ = function
    return rebuilt, ""


def helper_call(name: str, *args: ast.expr) -> ast.Call:
    """The expression ``<name>(*args)`` for a helper given to :func:`edited`."""
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def is_name(node: Optional[ast.AST], name: Optional[str] = None) -> bool:
    """Whether ``node`` is a plain name (``name`` itself when given)."""
    return isinstance(node, ast.Name) and (name is None or node.id == name)


def is_method_call(node: Optional[ast.AST], owner: str, attribute: str) -> bool:
    """Whether ``node`` is ``<owner>.<attribute>(...)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == attribute and is_name(node.func.value, owner))
