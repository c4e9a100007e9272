"""Every block of docs/writing_patches.md, complete and runnable: `python
examples/docs/writing_patches.py` (with lazypatch and mmengine installed).

The doc's blocks name mmcv, mmdet and torch; here the same calls target three small
packages this script writes to a temporary directory (an ops library, a detector
library that checks its version at import, a model zoo with an mmengine registry),
so that each call's effect can be shown and checked. Each section prints what
happened and asserts it.
"""

import logging
import os
import sys
import tempfile
import textwrap

import lazypatch

PACKAGES = {
    "ops_lib/__init__.py": """
        __version__ = "2.0.1"
        from . import boxes
        from .boxes import nms, batched_nms
    """,
    "ops_lib/boxes.py": """
        def nms(boxes, threshold):
            return [box for box in boxes if box >= threshold]

        def batched_nms(boxes, threshold):
            return [nms(group, threshold) for group in boxes]
    """,
    "detector_lib/__init__.py": """
        import ops_lib
        assert ops_lib.__version__.startswith("2.1"), \\
            f"ops_lib=={ops_lib.__version__} is used but incompatible: install ops_lib 2.1"
        from ops_lib import batched_nms
    """,
    "model_zoo/__init__.py": "",
    "model_zoo/registry.py": """
        from mmengine.registry import Registry
        MODELS = Registry("model")
    """,
    "model_zoo/necks.py": """
        class FPN:
            def forward(self, x):
                return f"FPN({x})"

        class Model:
            @classmethod
            def make(cls):
                return "original make"
    """,
    "my_pkg/__init__.py": "",
    "my_pkg/fpn.py": """
        def forward(self, x):
            return f"my forward({x})"

        class MyFPN:
            pass
    """,
}


def write_packages() -> str:
    root = tempfile.mkdtemp(prefix="lazypatch-docs-")
    for relative, source in PACKAGES.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            file.write(textwrap.dedent(source))
    sys.path.insert(0, root)
    return root


def the_api_in_one_block() -> None:
    """## The API in one block"""
    calls = []

    def my_wrapper(wrapped, instance, args, kwargs):
        calls.append(args)
        return wrapped(*args, **kwargs)

    def my_batched_nms(boxes, threshold):
        return "batched on the device"

    @lazypatch.when_imported("ops_lib.boxes", name="myops.nms_fallback",
                             requires=["lazypatch>=0.1"], priority=0, tags=["ops"])
    def nms_fallback(mod, patch):
        patch.wrap(mod, "nms", my_wrapper)
        patch.setattr(mod, "batched_nms", my_batched_nms, rebind=True)

    @lazypatch.before_import("detector_lib")
    def present_new_ops(mod, patch):
        import ops_lib
        patch.setattr(ops_lib, "__version__", "2.1.0")
        patch.revert_after_import()

    import detector_lib
    import ops_lib
    # rebind=True also fixed the copies made by `from .nms import ...` and by detector_lib
    assert detector_lib.batched_nms([[1]], 0) == "batched on the device"
    assert ops_lib.boxes.nms([1, 5], 2) == [5] and calls == [([1, 5], 2)]
    assert ops_lib.__version__ == "2.0.1"          # the presented version was reverted
    statuses = {record["name"]: record["status"] for record in lazypatch.report()}
    assert statuses["myops.nms_fallback"] == "applied"
    assert "myops.nms_fallback" in lazypatch.render_report()
    lazypatch.unpatch("myops.nms_fallback")
    assert detector_lib.batched_nms([[1]], 0) == [[1]]
    with lazypatch.patched(tags=["ops"]):
        assert detector_lib.batched_nms([[1]], 0) == "batched on the device"
    assert detector_lib.batched_nms([[1]], 0) == [[1]]
    print("the API in one block: applied, reported, undone, scoped")


def class_patches() -> None:
    """Declarative class patches"""
    @lazypatch.patches("model_zoo.necks.FPN")
    class PatchedFPN:
        def forward(self, x):
            return f"patched FPN({x})"

    from model_zoo.necks import FPN
    assert FPN().forward(1) == "patched FPN(1)"
    lazypatch.unpatch_all()
    assert FPN().forward(1) == "FPN(1)"
    print("class patch: FPN.forward replaced, then restored")


def dotted_paths() -> None:
    """## Patches by dotted path"""
    logged = []

    def log_calls(wrapped, instance, args, kwargs):
        logged.append(wrapped.__name__)
        return wrapped(*args, **kwargs)

    def my_make(cls):
        return "my make"

    lazypatch.replace("model_zoo.necks.FPN.forward", "my_pkg.fpn:forward")
    lazypatch.replace("model_zoo.necks:Model.make", my_make)
    lazypatch.wrap("ops_lib.boxes.nms", log_calls)
    lazypatch.replace("ops_lib.boxes.batched_nms", "my_pkg.fpn:forward",
                      precheck=lambda: False)     # no device here: skipped
    from model_zoo.necks import FPN, Model
    import ops_lib.boxes
    assert FPN().forward(2) == "my forward(2)" and Model.make() == "my make"
    assert ops_lib.boxes.nms([3], 1) == [3] and logged == ["nms"]
    statuses = {record["name"]: record["status"] for record in lazypatch.report()}
    assert statuses["replace:ops_lib.boxes.batched_nms"] == "skipped", statuses
    lazypatch.unpatch_all()
    print("dotted paths: replaced, wrapped, skipped by its precheck")


def registry_entries() -> None:
    """## Registry entries"""
    lazypatch.registry_entry("model_zoo.registry:MODELS", "FPN", "my_pkg.fpn:MyFPN")
    from model_zoo.registry import MODELS
    from my_pkg.fpn import MyFPN
    assert type(MODELS.build(dict(type="FPN"))) is MyFPN
    lazypatch.unpatch_all()
    assert MODELS.get("FPN") is None
    print("registry entry: MODELS builds MyFPN, removed again on undo")


def event_actions() -> None:
    """## What applying, skipping and failing do"""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    lazypatch.set_event_action("skip", "warn", selector="tag:openmmlab")
    lazypatch.replace("model_zoo.necks.Model.make", lambda cls: "g",
                      events={"apply": "log:info"})
    lazypatch.set_event_action("failure", "raise")
    from model_zoo.necks import Model
    assert Model.make() == "g"
    lazypatch.reset()
    print("event actions: set per pack, per patch and globally")


if __name__ == "__main__":
    write_packages()
    the_api_in_one_block()
    class_patches()
    dotted_paths()
    registry_entries()
    event_actions()
