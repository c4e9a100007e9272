"""Registering a patch: every argument checked before anything is recorded.

Bad input is refused here, at the decorator line, with an error that names
the problem and the fix, and nothing is registered: a patch that can never
run correctly must not reach the report as ``pending`` or, worse, as
``applied`` (a coroutine function "runs" without executing its body).
"""

import sys

from ..state import AFTER, BEFORE, STATE, RegisteredPatch
from ..watch.importer import LazyPatchFinder, install_finder

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

    from ..decide.requirements import Requirement


_DEFERRED_BODY_MASK = 0x20 | 0x80 | 0x100 | 0x200

# The names some thread is importing right now: CPython keeps a module lock per
# name while its import runs (importlib._bootstrap._module_locks). Any other
# Python gets an empty mapping, and registration simply applies when it can.
_module_locks: "Any" = getattr(sys.modules.get("importlib._bootstrap"), "_module_locks", None)
if not isinstance(_module_locks, dict):
    _module_locks = {}
_FUNCTION = type(lambda: None)

# Runs before every other patch of its import (plugin pack loaders use it).
FIRST = -(2 ** 62)

# The default tags of register(), shared by every patch that has none (immutable): no
# set built per registration (10,000 patches: benchmarks/COSTS.md). No requirements
# are the empty tuple, a singleton.
_NO_TAGS: "frozenset" = frozenset()


# Tuples of tags already checked, and their set (the default's included): a memo of a
# pure check, as below.
_tag_sets: "Dict[Tuple[str, ...], frozenset]" = {(): _NO_TAGS}

# Requirement strings in their simplest forms (a distribution name, or one with clauses
# such as ">=0.10,<0.11" on plain release numbers: every built-in pack's) are checked
# here; any other is parsed by decide/requirements.py, which raises naming what is wrong.
# So a declaration never loads decide/ (the requirements are parsed when first evaluated,
# at the target's import): about a sixth of activation (benchmarks/COSTS.md).
_REQUIREMENT_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
_SIMPLE_OPERATORS = ("<", "<=", ">", ">=", "==", "!=")

# Tuples of requirements already checked -> what registration keeps (a memo: packs
# repeat their lists, and a decorator's checked tuple is checked again as it registers).
_checked_requirements: "Dict[Tuple[Any, ...], Tuple[Any, ...]]" = {}


def _is_simple_requirement(text: "Any") -> bool:
    """Whether ``text`` is ``name`` or ``name<op><release>[,<op><release>...]`` with no
    space, extras, marker, pre/post/dev/local label, wildcard, ``~=`` or ``===``: a form
    that decide/requirements.py always accepts."""
    if text.__class__ is not str:
        return False
    rest = text.lstrip(_REQUIREMENT_NAME_CHARACTERS)
    end = len(text) - len(rest)
    if not end or not text[0].isalnum() or not text[end - 1].isalnum():
        return False
    for clause in rest.split(",") if rest else ():
        version = clause.lstrip("<>=!")
        if clause[:len(clause) - len(version)] not in _SIMPLE_OPERATORS:
            return False
        for part in version.split("."):
            if not (part.isdigit() and part.isascii()):   # ASCII digits, as PEP 440
                return False
    return True


def checked_requirements(requires: "Iterable[Union[str, Requirement]]") -> "Tuple[Any, ...]":
    """``requires`` as a patch keeps them: the strings as given when all are in their
    simplest forms, else every one parsed (``Requirement``). A bad one raises
    ValueError/TypeError naming it, at the decorator line."""
    given: "Tuple[Any, ...]" = requires if requires.__class__ is tuple else \
        (requires,) if isinstance(requires, str) else tuple(requires)
    try:
        known = _checked_requirements.get(given)
    except TypeError:   # an unhashable item: the parser names it
        known = None
    if known is not None:
        return known
    checked = given
    for text in given:
        if not _is_simple_requirement(text):
            from ..decide.requirements import parse_requirements
            checked = parse_requirements(given)
            break
    _checked_requirements[given] = _checked_requirements[checked] = checked
    return checked


# Targets already found valid: packs register many patches on few targets, and
# registration runs at activation (see benchmarks/COSTS.md). A memo of a pure check.
_valid_targets: "set" = set()


def validate_target(target: object) -> str:
    """Return ``target`` if it is an absolute dotted module name, else raise."""
    if target.__class__ is str and (target.isidentifier() or target in _valid_targets):
        return target   # a top-level name is one C call; dotted names are remembered
    if not isinstance(target, str):
        raise TypeError(f"patch target must be a module name string such as "
                        f"'mmcv.ops', got {target!r} ({type(target).__name__})")
    if not target:
        raise ValueError("patch target is empty: name the module to patch, "
                         "such as 'mmcv.ops'")
    if target.startswith("."):
        raise ValueError(f"patch target {target!r} is relative: use the absolute "
                         f"module name, such as 'mmcv.ops'")
    for part in target.split("."):
        if not part.isidentifier():   # C-speed; also rejects "" from ".." and "1mod"
            raise ValueError(f"patch target {target!r} is not a valid dotted module "
                             f"name: {part!r} is not an identifier")
    _valid_targets.add(target)
    return target


# What ``RegisteredPatch(...)`` calls, called by ``register`` without the type call.
_new_patch = RegisteredPatch.__new__
_init_patch = RegisteredPatch.__init__


def _tag_set(tags: "Iterable[str]", name: str) -> "frozenset":
    """The tags as a set of non-empty strings; raises naming the patch otherwise."""
    if isinstance(tags, str):
        tags = (tags,)
    try:
        tag_set = frozenset(tags)
    except TypeError:
        raise TypeError(f"patch {name!r}: tags must be a list of strings, got {tags!r}") from None
    for tag in tag_set:
        if tag.__class__ is not str or not tag:
            raise ValueError(f"patch {name!r}: tags must be non-empty strings, got {tag!r}")
    return tag_set


def register(function: "Callable[..., Any]", target: str, *, phase: str = AFTER,
             name: "Optional[str]" = None, priority: int = 0,
             requires: "Iterable[Union[str, Requirement]]" = (), tags: "Iterable[str]" = (),
             enabled: bool = True, events: "Optional[Dict[str, str]]" = None) -> str:
    """Register ``function`` as a patch on module ``target``; return its name.

    The non-decorator form of ``when_imported``/``before_import`` (``phase``
    is ``"after"`` or ``"before"``). Applies at once if the target is already
    imported; never imports it. Bad arguments raise TypeError/ValueError
    naming the fix, and register nothing. ``events`` sets this patch's own
    event actions, such as ``{"failure": "raise", "skip": "log"}``.
    """
    # lazypatch.register itself; a valid argument costs one type identity test, anything
    # else takes the full check (10,000 registrations under 30 ms: measure_scale.py).
    if target.__class__ is not str or not (target in _valid_targets or target.isidentifier()):
        target = validate_target(target)   # (its fast path above, without the call)
    if phase is not AFTER and phase is not BEFORE or name.__class__ is not str or not name \
            or name.isspace() or priority.__class__ is not int:
        from .argument_checks import checked_arguments  # not at activation: COSTS.md
        phase, name, priority = checked_arguments(function, phase, name, priority)
    if enabled is not True and enabled is not False:
        raise TypeError(f"patch {name!r}: enabled must be True or False, got {enabled!r}")
    tag_set = _NO_TAGS if tags.__class__ is tuple and not tags else _checked_tags(tags, name)
    if requires.__class__ is not tuple or requires:
        requires = checked_requirements(requires)   # a memo: packs repeat their lists
    # takes_context's common case, without the call: a plain function whose call runs
    # its body, taking (module, patch) or (module).
    context = None
    code = function.__code__ if function.__class__ is _FUNCTION else None
    if code is not None and not code.co_flags & _DEFERRED_BODY_MASK:
        count = code.co_argcount
        required = count - len(function.__defaults__ or ())
        if required <= 2 and (count >= 2 or code.co_flags & 0x04):
            context = True
        elif required <= 1 and count >= 1:
            context = False
    if context is None:
        from .argument_checks import takes_context
        context = takes_context(function, name)
    actions = None
    if events is not None:   # events.py only when asked: activation does not load it
        from ..decide.events import validate
        actions = validate(events, name)
    # RegisteredPatch's __init__ called directly: RegisteredPatch(...) enters it from C.
    patch = _new_patch(RegisteredPatch)
    _init_patch(patch, name, target, function, phase, priority, requires, tag_set, enabled,
                context)
    _index(patch, actions)
    return name


def _checked_tags(tags: "Iterable[str]", name: str) -> "frozenset":
    """The tags as a set; the same tuple (a pack's constant) is checked once."""
    if tags.__class__ is not tuple:
        return _tag_set(tags, name)
    try:
        known = _tag_sets.get(tags)
    except TypeError:   # an unhashable item: _tag_set names the problem
        known = None
    if known is None:
        known = _tag_sets[tags] = _tag_set(tags, name)
    return known


def _index(patch: "RegisteredPatch", actions: "Optional[Any]") -> None:
    """Index a checked patch with the configuration's rules applied to it (safe from any
    thread: nothing is lost to a race), and apply it if its target is imported."""
    catalog = STATE.catalog
    name = patch.name
    with STATE.lock:
        existing = catalog.by_name.get(name)
        if existing is not None:
            raise ValueError(f"a patch named {name!r} is already registered (on "
                             f"{existing.target!r}); pass a unique name=...")
        if STATE.disable_rules or STATE.enable_rules:   # then decide/ is loaded already
            from ..decide.selection import decide_at_registration
            decide_at_registration(patch)
        catalog.add(patch)
    if actions:
        from ..decide.events import declare
        declare(name, actions)
    finder = STATE.finder
    meta_path = sys.meta_path
    if finder is None or not meta_path or meta_path[0] is not finder:
        ensure_finder()
    # Only a target that is imported (or being imported) needs the application
    # machinery now; at activation none is, and application is loaded on the
    # first watched import instead (see benchmarks/COSTS.md).
    target = patch.target
    if target in sys.modules or target in _module_locks:
        from ..apply.application import apply_to_imported
        apply_to_imported(patch)


def declare_opt_in_pack(name: str, module: str) -> None:
    """Remember that importing ``module`` registers pack ``name``, whose every patch is
    off by default; it is imported now if the configuration's rules name it, else
    when a selector first does (``enable()``, ``lazypatch list``)."""
    if not isinstance(name, str) or not name or "." in name:
        raise ValueError(f"an opt-in pack name is one word such as 'device', got {name!r}")
    if not isinstance(module, str) or not module:
        raise ValueError(f"pack {name!r}: module must be a module name such as "
                         f"'my_packs.{name}', got {module!r}")
    with STATE.lock:
        STATE.opt_in_packs[name] = module
        rules = STATE.enable_rules + STATE.disable_rules
    if rules:
        from ..decide.selection import load_opt_in_packs
        load_opt_in_packs(rules)


def ensure_finder() -> None:
    """Install the finder first on sys.meta_path unless it is there."""
    finder = STATE.finder
    if finder is None:
        with STATE.lock:
            if STATE.finder is None:
                STATE.finder = LazyPatchFinder(STATE.catalog.by_target, _run_body_first_time)
            finder = STATE.finder
    install_finder(finder)


def _run_body_first_time(loader: "Any", module: "Any", *arguments: "Any") -> None:
    """The finder's first watched import loads the application machinery (and the
    ledger) and hands the finder the real ``run_body`` for every later import."""
    from ..apply.application import run_body
    STATE.finder.set_run_body(run_body)
    run_body(loader, module, *arguments)
