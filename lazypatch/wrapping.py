"""What ``patch.wrap`` puts in place of a module's function: a real function.

wrapt's ``FunctionWrapper`` is a proxy: it forwards attribute reads to what it
wraps, ``__code__`` included. That is what makes it transparent, and it is
what made ``torch.compile`` silently drop the wrapper (dynamo reads the
proxy's ``__code__`` and inlines the original's body), and what made
``copy.deepcopy``, ``copy.copy`` and ``pickle`` raise ``object proxy must
define __deepcopy__()`` for any model holding the function (an
``nn.TransformerEncoder`` deep-copies its layer, EMA deep-copies the model,
``torch.save`` pickles it).

A function defined here instead is an ordinary Python function whose body
calls ``wrapper(original, None, args, kwargs)``: the compiler traces through
it (and so through the wrapper), ``deepcopy`` returns it as it returns any
function, and ``pickle`` stores it by name (its ``__module__`` and
``__qualname__`` are the original's, and the name leads to it while the patch
is in force). Its ``__wrapped__`` is the original, as ``functools.wraps`` gives.

Methods, class methods and static methods on classes still get wrapt's
``FunctionWrapper``: binding them exactly as the original would be bound is
what wrapt is for, and the call goes through its descriptor protocol.

TorchScript cannot compile a ``*args`` function. Where the original is one
of the operators TorchScript knows by identity (``torch.cat`` is
``aten::cat``), the wrapper is registered under the same operator; where it
is one of torch's Python functions that TorchScript compiles from source
(``torch.nn.functional.relu``), TorchScript reads the original's source
through ``__wrapped__`` and resolves its names through the wrapper's globals,
which are therefore the original's. Either way scripted code keeps compiling
to the very call it made before (scripted code runs no Python, so the wrapper
does not run there; traced code records it).
"""

from __future__ import annotations

import sys
from types import FunctionType, ModuleType

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional


def wrapper_function(original: "Any", wrapper: "Callable[..., Any]") -> "Any":
    """A plain function calling ``wrapper(original, None, args, kwargs)``, named and
    documented as ``original`` (its ``__wrapped__`` is ``original``)."""
    # The original's own body may call it again by its module name, which now names
    # this function: torch.nn.functional.relu re-dispatches to ``relu`` under a
    # TorchFunctionMode (torch.compile's aot backends trace under one), and the wrapper
    # would apply twice. A call made while this wrapper runs, on the same thread, goes
    # to the original.
    from threading import local
    state = local()
    # What this function calls, in a cell that ``retarget`` can change: when a wrap
    # below this one is undone, this one must call what that one wrapped.
    target = [original]

    def wrapped_call(*args: "Any", **kwargs: "Any") -> "Any":
        if getattr(state, "inside", False):
            return target[0](*args, **kwargs)
        state.inside = True
        try:
            return wrapper(target[0], None, args, kwargs)
        finally:
            state.inside = False
    namespace = getattr(original, "__globals__", None)
    if isinstance(namespace, dict):
        # The original's module globals as this function's: TorchScript, meeting this
        # function, reads the original's source (through __wrapped__) and resolves its
        # names through this function's globals, which must then be the original's.
        wrapped_call = FunctionType(wrapped_call.__code__, namespace, wrapped_call.__name__,
                                    None, wrapped_call.__closure__)
    take_identity(wrapped_call, original)
    wrapped_call.__lazypatch_wrapper__ = wrapper   # type: ignore[attr-defined]
    wrapped_call.__lazypatch_target__ = target     # type: ignore[attr-defined]
    return wrapped_call


def retarget(wrapped: "Any", below: "Any", replacement: "Any") -> None:
    """If ``wrapped`` (what a wrap put in place) calls ``below``, make it call
    ``replacement``: the ledger splices out an undone wrap that sat under another one
    on the same slot, and the wrap above must then call what the undone one wrapped,
    or undoing a patch would leave its wrapper running."""
    try:
        current = wrapped.__wrapped__
    except Exception:
        return
    if current is not below:
        return
    target = getattr(wrapped, "__lazypatch_target__", None)
    if isinstance(target, list):          # wrapper_function's cell
        target[0] = replacement
        wrapped.__wrapped__ = replacement
    elif type(wrapped) is _METHOD_WRAPPER.get("classes"):  # the proxy's wrapped object
        wrapped.__wrapped__ = replacement


def take_identity(function: "Any", original: "Any") -> None:
    """Give a function that stands in for ``original`` its module, names, doc, attributes
    and ``__wrapped__`` (``functools.update_wrapper``, tolerating values a function
    refuses): reports, ``inspect`` and ``pickle`` then see the original's identity."""
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(function, attribute, getattr(original, attribute))
        except (AttributeError, TypeError):
            pass
    function.__dict__.update(getattr(original, "__dict__", {}))
    function.__wrapped__ = original


def takes_a_plain_function(owner: "Any", original: "Any") -> bool:
    """Whether ``patch.wrap`` puts a plain function in place: a module's attribute that
    is a function or a builtin (not a class, not a descriptor needing binding)."""
    if not isinstance(owner, ModuleType) or isinstance(original, type):
        return False
    kind = type(original).__name__
    return kind in ("function", "builtin_function_or_method")


def torchscript_table() -> "Optional[Dict[int, str]]":
    """TorchScript's id -> operator table where torch.jit is loaded already, else None
    (nothing of torch is imported here)."""
    builtins = sys.modules.get("torch.jit._builtins")
    table_of = getattr(builtins, "_get_builtin_table", None)
    if table_of is None:
        return None
    try:
        return table_of()
    except Exception:   # a torch without it, or one that fails to build it: not ours to fix
        return None




_METHOD_WRAPPER: "Dict[str, Any]" = {}


def method_wrapper(wrapt: "Any", owner: type, name: str, original: "Any",
                   wrapper: "Callable[..., Any]") -> "Any":
    """wrapt's ``FunctionWrapper`` around a class's raw descriptor, taught what a proxy
    cannot guess: copy and deepcopy treat it (and what it binds to) as they treat a
    function or a bound method, and pickle stores it by reference, as
    ``getattr(owner, name)`` (or ``getattr(instance, name)`` once bound), which is how a
    bound method pickles. Without this, ``pickle.dumps(dataset.collate)`` (a spawn
    DataLoader's ``collate_fn``) raised ``object proxy must define __reduce__()``."""
    classes = _METHOD_WRAPPER.get("classes")
    if classes is None:
        classes = _METHOD_WRAPPER["classes"] = _method_wrapper_classes(wrapt)
    wrapped = classes(original, wrapper)
    wrapped._self_lazypatch_home = (owner, name)
    return wrapped


def _method_wrapper_classes(wrapt: "Any") -> "Any":
    """The two classes (defined once, when wrapt is first needed): the wrapper in the
    class's ``__dict__`` and what it returns when an attribute read binds it."""

    class BoundMethodWrapper(wrapt.BoundFunctionWrapper):
        def _lazypatch_receiver(self) -> "Any":
            instance = self._self_instance
            owner, _ = self._self_parent._self_lazypatch_home
            return owner if instance is None else instance

        def __copy__(self) -> "Any":
            return self                  # as a bound method: immutable

        def __deepcopy__(self, memo: "Dict[int, Any]") -> "Any":
            from copy import deepcopy
            receiver = self._lazypatch_receiver()
            if isinstance(receiver, type):
                return self              # classes deep-copy as themselves
            _, name = self._self_parent._self_lazypatch_home
            return getattr(deepcopy(receiver, memo), name)

        def __reduce_ex__(self, protocol: "Any") -> "Any":
            _, name = self._self_parent._self_lazypatch_home
            return getattr, (self._lazypatch_receiver(), name)

    class MethodWrapper(wrapt.FunctionWrapper):
        __bound_function_wrapper__ = BoundMethodWrapper

        def __copy__(self) -> "Any":
            return self                  # as a function: copied as itself

        def __deepcopy__(self, memo: "Dict[int, Any]") -> "Any":
            return self

        def __reduce_ex__(self, protocol: "Any") -> "Any":
            # By reference, as pickle stores a function: the owner's raw slot, read
            # back through its __dict__ so that unpickling returns this very object.
            owner, name = self._self_lazypatch_home
            return _own_attribute, (owner, name)

    return MethodWrapper


def _own_attribute(owner: "Any", name: str) -> "Any":
    """``owner.__dict__[name]``, falling back to ``getattr`` (for unpickling a wrapper
    stored by reference: where the patch is not in force, the attribute is the original)."""
    namespace = getattr(owner, "__dict__", {})
    return namespace[name] if name in namespace else getattr(owner, name)
