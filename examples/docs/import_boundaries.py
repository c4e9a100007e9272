"""The block of docs/import_boundaries.md, complete and runnable: `python
examples/docs/import_boundaries.py`.

flash_attn and apex are not installed here, as on most machines; the doc's `mmcv.ops`
and `mmcv._ext` become two small modules this script writes (`vision_ops`,
`vision_ext`), so that nothing but lazypatch is needed. Each step asserts its effect.
"""

import os
import sys
import tempfile
import textwrap
import types

import lazypatch

PACKAGES = {
    "my_pkg/__init__.py": "",
    "my_pkg/apex_shim.py": """
        '''What `import apex` gives while the replacement is declared.'''
        def fused_adam():
            return "the shim's optimizer"
    """,
    "my_pkg/ops.py": """
        def nms(boxes):
            return sorted(boxes)[-1:]
    """,
    "vision_ops.py": """
        def roi_align(x):
            return x
    """,
}


def write_packages() -> None:
    root = tempfile.mkdtemp(prefix="lazypatch-docs-")
    for relative, source in PACKAGES.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            file.write(textwrap.dedent(source))
    sys.path.insert(0, root)


write_packages()

# A module that is not installed, at any depth; missing parents get bare stand-ins.
lazypatch.stand_in("flash_attn.ops.triton", attributes={"VERSION": "0"})
# `import apex` gives my_pkg.apex_shim; the real apex never runs.
lazypatch.replace_module("apex", "my_pkg.apex_shim")
# Names set on vision_ops right after its body ran; strings are "pkg.mod:attribute".
lazypatch.inject("vision_ops", {"nms": "my_pkg.ops:nms", "HAS_CUDA_OPS": False})

import apex                         # noqa: E402
import flash_attn.ops.triton        # noqa: E402
import vision_ops                   # noqa: E402

assert flash_attn.ops.triton.VERSION == "0"
assert apex.fused_adam() == "the shim's optimizer"
assert vision_ops.nms([3, 1, 2]) == [3] and vision_ops.HAS_CUDA_OPS is False

# A module put into sys.modules by hand never goes through an import: hand it over.
seen = []


@lazypatch.when_imported("vision_ext", name="docs.vision_ext_seen")
def vision_ext_seen(module, patch):
    patch.setattr(module, "SEEN", True, new=True)
    seen.append(module.__name__)


my_ext = types.ModuleType("vision_ext")
sys.modules["vision_ext"] = my_ext
lazypatch.notify_module_loaded(my_ext)          # its when_imported patches apply now
assert seen == ["vision_ext"] and my_ext.SEEN is True

statuses = {record["name"]: record["status"] for record in lazypatch.report()
            if record["name"].split(":", 1)[0] in ("stand_in", "replace_module", "inject")}
print("\n".join(f"{status:8} {name}" for name, status in sorted(statuses.items())))
lazypatch.unpatch_all()
assert not hasattr(vision_ops, "nms") and not hasattr(my_ext, "SEEN")
print("every boundary undone")
