"""The export pack: ``torch.export.export`` of transformers models, undone exactly.

Off by default (tag ``export``): ``with lazypatch.patched("export"): ...`` or
``LAZYPATCH_ENABLE=export``. This module only declares patches; each one's code
is imported when its target module (``transformers.cache_utils``, a model
family's modeling module) is imported, never before, so entering the scope
imports nothing the user's code did not import. See docs/export.md.
"""

from __future__ import annotations

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "export"
TAGS = (PACK,)
OPT_IN = True
TARGETS = ("torch", "transformers")
REQUIRES = ()

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional



@lazypatch.when_imported("transformers.cache_utils", name=f"{PACK}.cache_pytree", tags=TAGS,
                         enabled=False)
def cache_pytree(module: "Any", patch: "Any") -> None:
    """Register the installed version's cache classes as pytree nodes (torch.export
    inputs and outputs), restored entry by entry at undo."""
    from .cache_pytree import register
    register(module, patch)


@lazypatch.when_imported("torch.export.exported_program", name=f"{PACK}.program_calls",
                         tags=TAGS, enabled=False)
def program_calls(module: "Any", patch: "Any") -> None:
    """A program exported in the scope, whose inputs or outputs hold a cache, keeps
    working after it: its ``module()`` registers the cache classes during each call."""
    from .program_calls import install
    install(module, patch)


def dynamic_shapes(value: "Any", shape_of: "Any") -> "Any":
    """The ``dynamic_shapes`` entry of ``torch.export.export`` for ``value`` (a cache,
    or a list/tuple/dict of them), with ``shape_of(tensor)`` for each tensor, e.g.
    ``lambda t: {0: batch, 2: cache_length}``. Works inside the scope and before it."""
    from .cache_pytree import children_shapes
    return children_shapes(value, shape_of)


def rewrite_control_flow(target: str, dump: "Optional[str]" = None, *,
                         tags: "Iterable[str]" = TAGS) -> str:
    """Declare that ``target``'s data-dependent ``if``s become ``torch.cond``; return
    the patch name (usable in ``lazypatch.patched(...)``).

    ``target`` is ``"pkg.mod:Class.method"`` (or ``"pkg.mod:function"``). Nothing is
    imported now: when ``pkg.mod`` is imported (at once if it already is, once the
    patch is enabled), the method is rewritten (registry/export/control_flow.py);
    ``dump``, a directory, receives the original source, the rewritten source and
    their diff. Undo puts the original function object back. A target that is not
    there, is wrapped by someone else, or has no ``if`` that can be rewritten is
    reported ``skipped`` with the reason. Off unless selected (``patched("export")``
    selects it with the default tags).
    """
    if not isinstance(target, str) or target.count(":") != 1:
        raise ValueError(f"rewrite_control_flow() takes 'pkg.mod:Class.method', got {target!r}")
    module_name, path = target.split(":")
    parts = path.split(".")
    if not module_name or not all(part.isidentifier() for part in parts) or \
            not all(part.isidentifier() for part in module_name.split(".")):
        raise ValueError(f"rewrite_control_flow(): {target!r} is not 'pkg.mod:Class.method'")
    if dump is not None and not isinstance(dump, str):
        raise TypeError(f"rewrite_control_flow(): dump must be a directory path, got {dump!r}")
    name = f"export.control_flow.{module_name}.{path}"

    def apply(module: "Any", patch: "Any") -> None:
        from .control_flow_patch import rewrite_in_module
        rewrite_in_module(module, parts, target, dump, patch)

    apply.__doc__ = f"rewrite the data-dependent `if`s of {target} into torch.cond"
    lazypatch.when_imported(module_name, name=name, tags=list(tags), enabled=False)(apply)
    return name


def rewrite_class(target: str, carrier: str, *, requires: "Iterable[str]" = (),
                  name: "Optional[str]" = None, tags: "Iterable[str]" = TAGS) -> str:
    """Declare that the members of class ``carrier`` replace those of class ``target``
    when ``target``'s module is imported; return the patch name.

    Both are ``"pkg.mod:Class"``; neither module is imported now. ``carrier`` is a
    class of edited copies (registry/export/transformers_4x.py): its ``_PINNED_``
    maps each member to the SHA-256 digests of the upstream sources it is a copy of,
    ``_COPIED_FROM_`` names that upstream. The patch applies only where ``requires``
    (PEP 508 version ranges) holds and every member's installed source is a pinned
    one (``lazypatch.source_drift``); otherwise it is reported ``skipped`` with the
    reason and nothing is replaced: a copy over a drifted source would silently throw
    upstream's changes away. Undo puts back the very same members. Off unless selected.
    """
    for label, value in (("target", target), ("carrier", carrier)):
        if not isinstance(value, str) or value.count(":") != 1 or not all(
                part.isidentifier() for side in value.split(":") for part in side.split(".")):
            raise ValueError(f"rewrite_class(): {label} must be 'pkg.mod:Class', got {value!r}")
    module_name, class_path = target.split(":")
    patch_name = name or f"export.rewrite.{module_name}.{class_path}"

    def apply(module: "Any", patch: "Any") -> None:
        from .class_rewrite_patch import replace_members
        replace_members(module, class_path.split("."), carrier, patch)

    apply.__doc__ = f"replace members of {target} with the pinned copies in {carrier}"
    lazypatch.when_imported(module_name, name=patch_name, requires=list(requires),
                            tags=list(tags), enabled=False)(apply)
    return patch_name


# transformers rewrites: (target, carrier, versions where the copied source can be).
# The ranges only keep the report plain on other versions; what decides is the
# pinned source of each member.
TRANSFORMERS_REWRITES = (
    # DynamicCache tests an empty layer with len(tensor) == 0, which turns the batch
    # size into a constant for torch.export (every 4.48 decoder with a cache). The
    # copied source is the same in 4.47.1, 4.48.3, 4.49.0 and 4.50.3; 4.46.3's differs.
    ("transformers.cache_utils:DynamicCache",
     "lazypatch.registry.export.transformers_4x:DynamicCacheEmptyLayer",
     ("transformers>=4.47,<4.51",)),
)
for _target, _carrier, _versions in TRANSFORMERS_REWRITES:
    rewrite_class(_target, _carrier, requires=_versions)


# Layers whose forward branches on a tensor's value (a float16 overflow clamp),
# which torch.export cannot trace: declared by dotted path, imported by no one here.
KNOWN_CONTROL_FLOW = (
    "transformers.models.bart.modeling_bart:BartEncoderLayer.forward",
    "transformers.models.marian.modeling_marian:MarianEncoderLayer.forward",
    "transformers.models.plbart.modeling_plbart:PLBartEncoderLayer.forward",
    "transformers.models.mvp.modeling_mvp:MvpEncoderLayer.forward",
    "transformers.models.blenderbot_small.modeling_blenderbot_small:"
    "BlenderbotSmallEncoderLayer.forward",
)
for _target in KNOWN_CONTROL_FLOW:
    rewrite_control_flow(_target)


@lazypatch.when_imported("torch.fx.experimental.symbolic_shapes", name=f"{PACK}.stop_if_static",
                         tags=TAGS + ("explicit",), enabled=False)
def stop_if_static(module: "Any", patch: "Any") -> None:
    """Raise where a dimension declared dynamic becomes a constant, so that the
    traceback shows the user's line that caused it (torch reports it only at the end
    of the export, without the line). Chosen by its exact name only."""
    from .static_dimensions import install
    install(module, patch)
