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

A class's methods, class methods and static methods get the same: a plain
function (inside a ``classmethod`` or ``staticmethod`` where the original is
one) that binds the original as the class would and calls the wrapper as
wrapt does (``instance`` the object, the class, or None). wrapt's proxy there
made ``torch.compile`` (every backend) inline the original's body and drop the
wrapper. Only other descriptors get wrapt's ``FunctionWrapper``. Every
stand-in looks like its original to ``inspect``: ``signature`` and
``getfullargspec`` (through ``__signature__``) give the original's parameters.

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
    from typing import Any, Callable, Dict, List, Optional


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
        target = wrapped.__dict__.get("__lazypatch_target__") \
            if hasattr(wrapped, "__dict__") else None
    except Exception:
        return
    if isinstance(target, list):          # a plain function's (or its descriptor's) cell
        if target[0] is below:
            target[0] = replacement
            function = getattr(wrapped, "__func__", wrapped)
            function.__wrapped__ = getattr(replacement, "__func__", replacement) \
                if function is not wrapped else replacement
        return
    try:
        current = wrapped.__wrapped__
    except Exception:
        return
    if current is below and type(wrapped) is _METHOD_WRAPPER.get("classes"):
        wrapped.__wrapped__ = replacement  # the proxy's wrapped object


def take_identity(function: "Any", original: "Any") -> None:
    """Give a function that stands in for ``original`` its module, names, doc, attributes,
    annotations, signature and ``__wrapped__`` (``functools.update_wrapper``, tolerating
    values a function refuses): reports, ``inspect`` and ``pickle`` then see the
    original's identity. ``inspect.getfullargspec`` does not follow ``__wrapped__`` but
    reads ``__signature__``: mmcv's ``auto_fp16`` / ``force_fp32`` map arguments by it."""
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(function, attribute, getattr(original, attribute))
        except (AttributeError, TypeError):
            pass
    function.__dict__.update(getattr(original, "__dict__", {}))
    annotations = getattr(original, "__annotations__", None)
    function.__annotations__ = dict(annotations) if isinstance(annotations, dict) else {}
    signature = signature_of(original)
    if signature is not None:
        function.__signature__ = signature
    function.__wrapped__ = original


def signature_of(original: "Any") -> "Any":
    """``inspect.signature(original)``, or None where it has none (many C functions)."""
    import inspect  # loaded by every program that wraps torch or mmcv functions already
    try:
        return inspect.signature(original)
    except (TypeError, ValueError):
        return None


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
    """What ``patch.wrap`` puts in a class's ``__dict__``: for a function, a class method,
    a static method or a method of a C type (``torch.Tensor.matmul``), the same kind of
    object around a plain function (``plain_method_wrapper``); for any other descriptor,
    wrapt's ``FunctionWrapper`` (``proxy_method_wrapper``)."""
    plain = plain_method_wrapper(original, wrapper)
    if plain is not None:
        return plain
    return proxy_method_wrapper(wrapt, owner, name, original, wrapper)


# The C types of a C class's methods (``str.upper``, ``object.__eq__``), which bind as
# functions do. Found from the interpreter's own objects: no import.
_METHOD_DESCRIPTORS = (type(str.upper), type(object.__eq__))


def plain_method_wrapper(original: "Any", wrapper: "Callable[..., Any]") -> "Any":
    """A function (inside a ``classmethod`` or ``staticmethod`` where the original is one)
    calling ``wrapper(wrapped, instance, args, kwargs)`` as wrapt would (``wrapped``
    bound, ``instance`` the object, the class for a class method, None for a static
    method), or None when ``original`` is another kind of descriptor.

    wrapt's proxy says it is a function (its ``__class__`` is the original's) and hands
    on the original's ``__code__``: ``torch.compile`` took it for the original and
    inlined the original's body, dropping the wrapper under every backend. A real
    function is traced through, wrapper included. It looks like the original to
    ``inspect`` (``take_identity``)."""
    target = [original]
    call: "Callable[..., Any]"
    if isinstance(original, (classmethod, staticmethod)):
        maker = _class_method_call if isinstance(original, classmethod) else _static_method_call
        call = maker(target, wrapper)
        take_identity(call, original.__func__)
        placed: "Any" = type(original)(call)
    elif type(original).__name__ == "function" or isinstance(original, _METHOD_DESCRIPTORS):
        call = placed = _instance_method_call(target, wrapper)
        take_identity(call, original)
    else:
        return None
    call.__lazypatch_wrapper__ = wrapper   # type: ignore[attr-defined]
    # What undo's retarget reads and changes (on the object in the class's __dict__;
    # a classmethod's or staticmethod's own __wrapped__ is read-only: its function's).
    placed.__lazypatch_target__ = target
    return placed


def _instance_method_call(target: "List[Any]", wrapper: "Callable[..., Any]"
                          ) -> "Callable[..., Any]":
    def call(self: "Any", /, *args: "Any", **kwargs: "Any") -> "Any":
        return wrapper(target[0].__get__(self, type(self)), self, args, kwargs)
    return call


def _class_method_call(target: "List[Any]", wrapper: "Callable[..., Any]"
                       ) -> "Callable[..., Any]":
    def call(cls: "Any", /, *args: "Any", **kwargs: "Any") -> "Any":
        return wrapper(target[0].__get__(None, cls), cls, args, kwargs)
    return call


def _static_method_call(target: "List[Any]", wrapper: "Callable[..., Any]"
                        ) -> "Callable[..., Any]":
    def call(*args: "Any", **kwargs: "Any") -> "Any":
        return wrapper(target[0].__func__, None, args, kwargs)
    return call


def proxy_method_wrapper(wrapt: "Any", owner: type, name: str, original: "Any",
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
