"""Storages: ``torch.UntypedStorage(n, device="cuda")``, ``TypedStorage(..., device="cuda")``,
``torch.cuda.FloatStorage(n)``, ``storage.cuda()`` and ``storage.to(device="cuda")``.

Every one of them ends in ``torch.UntypedStorage(..., device=...)`` (the C
constructor, which answers "Storage device not recognized: cuda" on a
CPU-only torch) or in ``_StorageBase.to`` / ``TypedStorage.to``. The class
keeps its identity: a ``__new__`` translating ``device=`` is set on it and
deleted again on undo, which gives the C constructor back.
"""

from __future__ import annotations

from .factories import device_keyword_function, translate_device_keyword

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def patch_storages(torch: "Any", patch: "Any") -> None:
    """UntypedStorage.__new__ and the storages' ``to`` methods translate ``device=``."""
    untyped = torch.UntypedStorage
    base_new = untyped.__mro__[1].__new__       # torch._C.StorageBase's C constructor

    def __new__(cls: type, *args: "Any", **kwargs: "Any") -> "Any":
        if kwargs:
            translate_device_keyword("torch.UntypedStorage", kwargs)
        return base_new(cls, *args, **kwargs)
    patch.setattr(untyped, "__new__", staticmethod(__new__))

    storage = torch.storage
    for owner, api in ((storage._StorageBase, "UntypedStorage.to"),
                       (storage.TypedStorage, "TypedStorage.to")):
        patch.setattr(owner, "to", device_keyword_function(api, vars(owner)["to"]))
