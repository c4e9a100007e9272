"""Run DrivingSDK's model patch files unchanged against lazypatch, in named host setups.

DrivingSDK's model zoo (``model_examples/<Model>/``) ports each model with a patch file
written against ``mx_driving.patcher`` (the 1.0 ``PatcherBuilder`` or the 2.0
``Patcher``). ``run_model_file`` runs one of them as its README says (the model's folder
on ``sys.path``, the file imported by its module name, its patcher built and applied) in
a fresh interpreter, and answers what a user of that file sees:

* whether the file imports (and the error where it does not);
* which modules applying the patcher imported (a patch must never import);
* every patch it declared, with its status once every target module that is installed
  here has been imported (a patch lands when its target is imported);
* every attribute, class member and registry entry left different from a run that
  imported the same modules without the patcher (the undo must be exact).

The host is a ``Setup``: files written beside the file (fake packages where the
hardware cannot exist), environment variables and lazypatch settings. ``SETUPS`` holds
the named ones; another setup is one more entry (``SETUPS["name"] = Setup(...)``).

Needs an extracted DrivingSDK checkout (nothing is downloaded)::

    git --git-dir=<mirror of Ascend/DrivingSDK> archive HEAD | tar -x -C /tmp/dsdk
    LAZYPATCH_DRIVING_SDK_CHECKOUT=/tmp/dsdk pytest tests/driving_sdk/test_model_files.py
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import clean_environment, last_json, write_tree  # noqa: E402
from packs.ascend.fakes_ascend import ASCEND_FAKES  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ModelFile:
    """One model patch file: where it lies, the folder its README puts on ``sys.path``,
    the module name it is imported as, and how its patcher is built (``entry``)."""
    path: str
    root: str
    module: str
    # "builder": call ``generate_patcher_builder()`` (1.0), enter ``builder.build()``;
    # "builder:<name>": the module-level builder ``<name>`` (1.0);
    # "configure": ``configure_patcher(default_patcher)`` then ``default_patcher.apply()``;
    # "group:<Class>": a 2.0 ``Patcher()`` holding the file's group ``<Class>``;
    # "script": importing the file applies ``default_patcher`` itself (train/test scripts).
    entry: str


_EXAMPLES = "model_examples"
MODEL_FILES: Tuple[ModelFile, ...] = (
    ModelFile(f"{_EXAMPLES}/BEVDet4D/bevdet4d_patch.py", f"{_EXAMPLES}/BEVDet4D",
              "bevdet4d_patch", "builder"),
    ModelFile(f"{_EXAMPLES}/BEVFormer/patch_a5.py", f"{_EXAMPLES}/BEVFormer", "patch_a5",
              "builder"),
    ModelFile(f"{_EXAMPLES}/Cosmos-Transfer1/tools/patch.py", f"{_EXAMPLES}/Cosmos-Transfer1/tools",
              "patch", "builder"),
    ModelFile(f"{_EXAMPLES}/DiffusionDrive/migrate_to_ascend/patch.py",
              f"{_EXAMPLES}/DiffusionDrive", "migrate_to_ascend.patch", "configure"),
    ModelFile(f"{_EXAMPLES}/DiffusionDrive/migrate_to_ascend/train.py",
              f"{_EXAMPLES}/DiffusionDrive", "migrate_to_ascend.train", "script"),
    ModelFile(f"{_EXAMPLES}/DiffusionDrive/migrate_to_ascend/test.py",
              f"{_EXAMPLES}/DiffusionDrive", "migrate_to_ascend.test", "script"),
    ModelFile(f"{_EXAMPLES}/FBOCC/tools/patch.py", f"{_EXAMPLES}/FBOCC/tools", "patch", "builder"),
    ModelFile(f"{_EXAMPLES}/OpenDWM/tools/patch.py", f"{_EXAMPLES}/OpenDWM/tools", "patch",
              "builder"),
    ModelFile(f"{_EXAMPLES}/OpenVLA/patch.py", f"{_EXAMPLES}/OpenVLA", "patch", "builder"),
    ModelFile(f"{_EXAMPLES}/PanoOcc/migrate_to_ascend/patch_main.py", f"{_EXAMPLES}/PanoOcc",
              "migrate_to_ascend.patch_main", "configure"),
    ModelFile(f"{_EXAMPLES}/PanoOcc/migrate_to_ascend/patch_panoseg_occ_head.py",
              f"{_EXAMPLES}/PanoOcc", "migrate_to_ascend.patch_panoseg_occ_head",
              "group:PanoSegOccHeadPatch"),
    ModelFile(f"{_EXAMPLES}/PanoOcc/migrate_to_ascend/train.py", f"{_EXAMPLES}/PanoOcc",
              "migrate_to_ascend.train", "script"),
    ModelFile(f"{_EXAMPLES}/PanoOcc/migrate_to_ascend/test.py", f"{_EXAMPLES}/PanoOcc",
              "migrate_to_ascend.test", "script"),
    ModelFile(f"{_EXAMPLES}/SalsaNext/train/tasks/semantic/patch.py",
              f"{_EXAMPLES}/SalsaNext/train/tasks/semantic", "patch",
              "builder:salsa_next_patcher_builder"),
    ModelFile(f"{_EXAMPLES}/Sparse4D/patch.py", f"{_EXAMPLES}/Sparse4D", "patch", "builder"),
    ModelFile(f"{_EXAMPLES}/Sparse4D/patch_a5.py", f"{_EXAMPLES}/Sparse4D", "patch_a5", "builder"),
    ModelFile(f"{_EXAMPLES}/SparseDrive/tools/patch.py", f"{_EXAMPLES}/SparseDrive/tools", "patch",
              "builder"),
    ModelFile(f"{_EXAMPLES}/VAD/tools/patch.py", f"{_EXAMPLES}/VAD/tools", "patch", "builder"),
)


# Files that cannot reach "imports, lands lazily, listed, undone exactly" in every setup,
# and why: path -> (a text every remaining problem contains, the reason).
KNOWN_SHORTFALLS: Dict[str, Tuple[str, str]] = {}
# (PanoOcc's patch_main.py and train.py were here: their skip_import('spconv') stub is in
# place when mmdet3d 1.0's `try: import spconv` runs, and mmdet3d.ops.spconv keeps it after
# restore(), as a module cannot be un-imported. The undo now says so, naming the global,
# and a leftover the undo said is not a silent one: ``ModelFileRun.said_leftovers``.)


@dataclass
class Setup:
    """A host: files written into the run's folder (on ``sys.path``), environment
    variables, and whether DrivingSDK's own ``mx_driving`` package is among the files."""
    files: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    # "module:attribute" keys the host itself changes when a file runs (not undone by
    # the file's restore, as nothing of the file made them)
    host_changes: Tuple[str, ...] = ()


def driving_sdk_operator_names(checkout: Path) -> List[str]:
    """The public names DrivingSDK's ``mx_driving/__init__.py`` exports (its operators):
    what its relative imports bind and what its ``__all__`` lists, read with ``ast``."""
    tree = ast.parse((checkout / "mx_driving" / "__init__.py").read_text(encoding="utf-8"))
    exported: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            exported.extend(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                exported.extend(element.value for element in node.value.elts
                                if isinstance(element, ast.Constant)
                                and isinstance(element.value, str))
    return sorted({name for name in exported if name.isidentifier() and not name.startswith("_")})


def fake_mx_driving_operators(checkout: Path) -> str:
    """Source appended to the FAKE ``mx_driving``: every operator name DrivingSDK exports
    that the fake does not define, as a function that raises when called (the kernels
    need an NPU); the names let ``from mx_driving import X`` lines work as on an NPU host."""
    lines = ["\n\ndef _needs_an_npu(name):",
             "    def operator(*args, **kwargs):",
             "        raise RuntimeError(f'FAKE mx_driving.{name}: the kernel needs an NPU')",
             "    operator.__name__ = operator.__qualname__ = name",
             "    return operator\n"]
    for name in driving_sdk_operator_names(checkout):
        lines.append(f"if {name!r} not in globals():\n    {name} = _needs_an_npu({name!r})")
    return "\n".join(lines) + "\n"


# torch_npu's fused operators (``torch_npu.npu_fusion_attention``...), which libraries
# import by name where torch_npu is found (transformers does): present, raising when called.
FAKE_FUSED_OPERATORS = """

def __getattr__(name):
    if not name.startswith("npu_"):
        raise AttributeError(f"module 'torch_npu' has no attribute {name!r}")
    def operator(*args, **kwargs):
        raise RuntimeError(f"FAKE torch_npu.{name}: the kernel needs an NPU")
    operator.__name__ = name
    return operator
"""


# torch_npu names torch's extension device type "npu" (``torch.device("npu")`` parses),
# as the real one does at import; the device pack then targets it on this FAKE NPU host.
FAKE_NPU_DEVICE_TYPE = """
try:
    torch.utils.rename_privateuse1_backend("npu")
except RuntimeError:
    pass   # named already in this process
# Tensor.npu() / Module.npu(), which torch_npu adds: the FAKE NPU's memory is the CPU's
torch.Tensor.npu = lambda self, *args, **kwargs: self
torch.nn.Module.npu = lambda self, *args, **kwargs: self
"""


FAKE_COMPILED_KERNELS = """
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    def kernel(*args, **kwargs):
        raise RuntimeError(f"FAKE mx_driving._C.{name}: the kernel needs an NPU")
    kernel.__name__ = name
    return kernel
"""


# DrivingSDK's own patcher, present in setup (a): the setting must put lazypatch's in
# its place, so importing this one is an error the run reports.
FAKE_DRIVING_SDK_PATCHER = (
    "raise ImportError('FAKE DrivingSDK mx_driving.patcher was imported: "
    "LAZYPATCH_DRIVING_SDK=lazypatch should have replaced it')\n")


def ascend_host_files(checkout: Path, with_patcher: bool) -> Dict[str, str]:
    """The FAKE torch_npu and mx_driving (DrivingSDK's operator names), with or without
    DrivingSDK's ``mx_driving.patcher`` subpackage."""
    files = dict(ASCEND_FAKES)
    # torch_npu's settings object, which the 1.0 builder's build() sets a field of
    files["torch_npu/__init__.py"] = ASCEND_FAKES["torch_npu/__init__.py"] + \
        "npu.config = types.SimpleNamespace(allow_internal_format=True)\n" + FAKE_NPU_DEVICE_TYPE + \
        FAKE_FUSED_OPERATORS
    # torch_npu.contrib.transfer_to_npu, which the model scripts import (the real one sends
    # CUDA calls to the NPU; the FAKE NPU's device is the CPU: nothing to send)
    files["torch_npu/contrib/__init__.py"] = ""
    files["torch_npu/contrib/transfer_to_npu.py"] = ""
    files["mx_driving/__init__.py"] = ASCEND_FAKES["mx_driving/__init__.py"] + \
        fake_mx_driving_operators(checkout)
    # DrivingSDK's compiled module, which some patch functions import (Sparse4D's
    # patch_a5.py: `import mx_driving._C`): every kernel name present, raising when called
    files["mx_driving/_C.py"] = FAKE_COMPILED_KERNELS
    if with_patcher:
        files["mx_driving/patcher/__init__.py"] = FAKE_DRIVING_SDK_PATCHER
    return files


# This machine's torchvision may be a build whose compiled library cannot load beside the
# installed torch (a CUDA wheel beside a CPU torch: "operator torchvision::nms does not
# exist" at ``import torchvision``, which every OpenMMLab import reaches). Each setup turns
# on lazypatch's stand-in for those operators, which is skipped where the library loads:
# the host is made whole, the file's patches are what is checked. PanoOcc's own compiled
# ``MultiScaleDeformableAttention`` (Deformable-DETR's, built by its ops/setup.py with nvcc)
# is not built here: its stand-in, skipped where it is built.
HOST_REPAIRS = "cuda_extensions.torchvision,cuda_extensions.MultiScaleDeformableAttention"

# The NPU stand-in's own host-level changes, made when a file imports ``torch_npu`` (which
# a run without the file never does): the host's, not the file's patches to undo.
NPU_STAND_IN_HOST_CHANGES = ("torch:npu", "torch:Tensor.npu", "torch.nn.modules.module:Module.npu")


def setups(checkout: Path) -> Dict[str, Setup]:
    """The named host setups. (a) ``fake_operators_setting_lazypatch``: DrivingSDK's
    operators and its patcher installed, ``LAZYPATCH_DRIVING_SDK=lazypatch``;
    (b) ``fake_operators_without_patcher``: the operators without the patcher, no setting;
    (c) ``npu_stand_in_without_torch_npu``: neither torch_npu nor DrivingSDK installed,
    ``LAZYPATCH_ENABLE=npu_stand_in`` (lazypatch's NPU stand-in and its ``mx_driving``).
    Hook: ``EXTRA_SETUPS`` (name -> function of the checkout giving a Setup)."""
    named = {
        "fake_operators_setting_lazypatch": Setup(
            ascend_host_files(checkout, with_patcher=True),
            {"LAZYPATCH_DRIVING_SDK": "lazypatch", "LAZYPATCH_ENABLE": HOST_REPAIRS},
            "FAKE mx_driving with DrivingSDK's operators and patcher, LAZYPATCH_DRIVING_SDK=lazypatch"),
        "fake_operators_without_patcher": Setup(
            ascend_host_files(checkout, with_patcher=False), {"LAZYPATCH_ENABLE": HOST_REPAIRS},
            "FAKE mx_driving with DrivingSDK's operators, no patcher subpackage, no setting"),
        "npu_stand_in_without_torch_npu": Setup(
            {}, {"LAZYPATCH_ENABLE": f"npu_stand_in,{HOST_REPAIRS}"},
            "neither torch_npu nor DrivingSDK installed, LAZYPATCH_ENABLE=npu_stand_in",
            host_changes=NPU_STAND_IN_HOST_CHANGES),
    }
    for name, make in EXTRA_SETUPS.items():
        named[name] = make(checkout)
    return named


# More host setups: name -> function(checkout) -> Setup.
EXTRA_SETUPS: Dict[str, "object"] = {}


RUNNER = r'''
import importlib, json, sys, types, warnings
with open(sys.argv[1], encoding="utf-8") as stream:
    config = json.load(stream)
warnings.simplefilter("ignore")
import lazypatch.auto
import lazypatch

OWN = ("lazypatch", "mx_driving", "torch_npu", "__main__", "_runner")

def own(name):
    top = name.split(".")[0]
    if name.startswith("__"):
        return True
    return top in OWN or top in config["project_packages"] or name == config["module"]

def describe(value):
    if isinstance(value, (staticmethod, classmethod)):
        inner = describe(value.__func__)
        return inner and f"{type(value).__name__}({inner})"
    if isinstance(value, property):
        return "property(" + ", ".join(str(describe(part)) for part in
                                      (value.fget, value.fset, value.fdel)) + ")"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, type):
        module = vars(value).get("__module__")
        return f"class {module if isinstance(module, str) else '?'}.{value.__qualname__}"
    code = getattr(value, "__code__", None)
    if code is not None:
        return (f"function {getattr(value, '__module__', None)}."
                f"{getattr(value, '__qualname__', '?')} {code.co_filename}:{code.co_firstlineno}")
    if isinstance(value, (types.BuiltinFunctionType, types.MethodDescriptorType,
                          types.WrapperDescriptorType)):
        return f"builtin {getattr(value, '__module__', None)}.{getattr(value, '__qualname__', '?')}"
    if callable(value) and not isinstance(value, (int, float, str, bytes)):
        return f"callable {type(value).__module__}.{type(value).__qualname__}"
    return None

def snapshot(names):
    state = {}
    for module_name in names:
        module = sys.modules.get(module_name)
        if module is None or own(module_name):
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for key, value in items:
            try:
                text = describe(value)
            except Exception:
                continue
            if text is not None and not (key.startswith("__") and key.endswith("__")):
                state[f"{module_name}:{key}"] = text
            if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
                for member, inner in list(vars(value).items()):
                    try:
                        text = describe(inner)
                    except Exception:
                        continue
                    if text is not None and member not in ("__dict__", "__weakref__", "__doc__"):
                        state[f"{module_name}:{key}.{member}"] = text
            try:
                namespace = None if isinstance(value, type) else vars(value)
                table = namespace.get("_module_dict") if isinstance(namespace, dict) else None
            except Exception:
                table = None
            if isinstance(table, dict):
                for entry, registered in list(table.items()):
                    state[f"{module_name}:{key}[{entry!r}]"] = describe(registered)
    return state

def rows():
    return {record["name"]: record for record in lazypatch.report()}

result = {"imported": False}
# The file's first line imports the patcher; what that import turns on (on an Ascend
# host, the device pack) belongs to the host in both runs, not to the file's patches.
try:
    import mx_driving.patcher
except BaseException as error:
    result["error"] = f"{type(error).__name__}: {error}"
before_import = rows()
if config["mode"] == "patched" and "error" not in result:
    try:
        module = importlib.import_module(config["module"])
        result["imported"] = True
    except BaseException as error:
        result["error"] = f"{type(error).__name__}: {error}"

if result["imported"] and config["mode"] == "patched":
    entry = config["entry"]
    before_apply = set(sys.modules)
    patcher = None
    try:
        if entry.startswith("builder"):
            builder = (module.generate_patcher_builder() if entry == "builder"
                       else getattr(module, entry.split(":", 1)[1]))
            patcher = builder.build()
            patcher.__enter__()
            undo = lambda: patcher.__exit__(None, None, None)
        elif entry == "configure":
            from mx_driving.patcher import default_patcher
            module.configure_patcher(default_patcher)
            default_patcher.apply()
            undo = default_patcher.restore
        elif entry.startswith("group:"):
            from mx_driving.patcher import Patcher
            group_patcher = Patcher()
            group_patcher.add(getattr(module, entry.split(":", 1)[1]))
            group_patcher.apply()
            undo = group_patcher.restore
        else:
            from mx_driving.patcher import default_patcher
            undo = default_patcher.restore
    except BaseException as error:
        result["apply_error"] = f"{type(error).__name__}: {error}"
        undo = None
    after_apply = rows()
    declared = {name: record for name, record in after_apply.items()
                if name not in before_import}
    targets = []
    for record in declared.values():
        target = str(record.get("target") or "")
        if target and target not in targets:
            targets.append(target)
    def stand_in(name):
        # skip_import stubs, replace_import's module and the parents of either are in
        # sys.modules at once (DrivingSDK's semantics): provided, not imported. A module
        # built in memory (no file behind it) ran no code of the package.
        try:
            namespace = object.__getattribute__(sys.modules[name], "__dict__")
        except Exception:
            return False
        return "__lazypatch_stand_in__" in namespace or (
            "__file__" not in namespace and "__path__" not in namespace)
    result["imported_by_apply"] = sorted(
        name for name in set(sys.modules) - before_apply
        if name in targets and not stand_in(name))
    missing = {}
    for target in targets:
        try:
            importlib.import_module(target)
        except BaseException as error:
            missing[target] = f"{type(error).__name__}: {error}"
    result["targets"] = targets
    result["targets_not_importable"] = missing
    final = rows()
    result["patches"] = {name: {"status": final[name]["status"],
                                "target": final[name].get("target"),
                                "reason": final[name].get("reason") or ""}
                         for name in declared if name in final}
    if undo is not None:
        try:
            undo()
        except BaseException as error:
            result["undo_error"] = f"{type(error).__name__}: {error}"
    # leftovers the undo said it could not take back (a stand-in a module bound meanwhile)
    result["said_after_undo"] = sorted({holder for record in lazypatch.report()
                                        for holder in record.get("late_references") or ()})
    result["modules"] = [name for name in sys.modules if not own(name)]
    result["state"] = snapshot(result["modules"])
    # modules of a lazy type (diffusers' and transformers' _LazyModule) fill their namespace
    # as names are asked: which are asked depends on the order of imports
    result["lazy_modules"] = [name for name in result["modules"]
                              if type(sys.modules.get(name)) not in (types.ModuleType, type(None))
                              and "__getattr__" in vars(type(sys.modules[name]))]
elif config["mode"] == "baseline":
    # The file itself is imported (not for the scripts, whose import applies the
    # patcher): what its own top-level code changes (Sparse4D's `mmcv.runner.init_dist =
    # ...` at import) is the file's, in both runs; the patcher's changes are compared.
    names = config.get("modules", [])
    if config["entry"] != "script":
        names = [config["module"], *names]
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    result["modules"] = [name for name in sys.modules if not own(name)]
    result["state"] = snapshot(result["modules"])
print(json.dumps(result))
'''


@dataclass
class ModelFileRun:
    """What a user of one model file sees in one setup (see the module's docstring)."""
    model_file: ModelFile
    setup: str
    imported: bool
    error: str = ""
    apply_error: str = ""
    undo_error: str = ""
    imported_by_apply: List[str] = field(default_factory=list)
    patches: Dict[str, Dict[str, str]] = field(default_factory=dict)
    targets_not_importable: Dict[str, str] = field(default_factory=dict)
    left_changed: Dict[str, Tuple[Optional[str], Optional[str]]] = field(default_factory=dict)
    # changes the undo could not take back and said so (LatePatchWarning, late_references)
    said_leftovers: List[str] = field(default_factory=list)

    def problems(self) -> List[str]:
        """Every way this run falls short of 'imports, lands lazily, listed, undone exactly'."""
        found: List[str] = []
        if not self.imported:
            found.append(f"does not import: {self.error}")
            return found
        for label, text in (("apply", self.apply_error), ("undo", self.undo_error)):
            if text:
                found.append(f"{label} raised {text}")
        if self.imported_by_apply:
            found.append(f"applying the patcher imported {self.imported_by_apply}")
        if not self.patches:
            found.append("no patch is listed in lazypatch.report()")
        for name, row in self.patches.items():
            imported_target = row["target"] not in self.targets_not_importable
            # a patch scoped to its module's execution (ensure_mmcv_version's version while
            # mmdet imports) landed and was undone by its scope
            scoped = row["status"] == "reverted" and "scoped to the execution of" in row["reason"]
            if imported_target and row["status"] not in ("applied", "skipped") and not scoped \
                    or row["status"] == "failed":
                found.append(f"{name} ({row['target']}): {row['status']} {row['reason']}".rstrip())
        for key, (before, after) in sorted(self.left_changed.items()):
            found.append(f"left changed after the undo: {key}: {before} -> {after}")
        return found


def _run_child(python: str, workdir: Path, sys_path: List[str], setup: Setup,
               config: Mapping[str, object], timeout: float) -> Dict[str, object]:
    environment = clean_environment(setup.environment)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(workdir), *sys_path, os.environ.get("LAZYPATCH_TEST_PYTHONPATH", str(REPOSITORY))])
    script = workdir / "_runner.py"
    script.write_text(RUNNER)
    configuration = workdir / "_runner.json"
    configuration.write_text(json.dumps(config))
    completed = subprocess.run([python, str(script), str(configuration)], cwd=workdir,
                               env=environment, capture_output=True, text=True, timeout=timeout)
    try:
        return last_json(completed.stdout)  # type: ignore[return-value]
    except (AssertionError, ValueError):
        raise RuntimeError(f"the runner of {config['module']} died (exit {completed.returncode})"
                           f"\n--- stdout ---\n{completed.stdout[-3000:]}"
                           f"\n--- stderr ---\n{completed.stderr[-6000:]}") from None


def model_project(model_file: ModelFile) -> List[str]:
    """The model's own project folder, where one is given: LAZYPATCH_MODEL_PROJECTS names
    a folder holding one checkout per model (``<folder>/BEVFormer``...), as the model's
    README has it cloned (fetched by hand; nothing is downloaded)."""
    folder = os.environ.get("LAZYPATCH_MODEL_PROJECTS", "")
    model = model_file.path.split("/")[1]
    project = Path(folder) / model if folder else None
    return [str(project)] if project is not None and project.is_dir() else []


def run_model_file(checkout: Path, model_file: ModelFile, setup_name: str, workdir: Path,
                   python: str = sys.executable, timeout: float = 600) -> ModelFileRun:
    """Run ``model_file`` from ``checkout`` unchanged in setup ``setup_name`` (twice, in
    fresh interpreters: with its patcher applied then undone, and without it, to compare
    what the undo left) and answer what a user sees. The file's folder is on
    ``sys.path`` as its README says, with the model's own project (``model_project``)."""
    setup = setups(checkout)[setup_name]
    workdir.mkdir(parents=True, exist_ok=True)
    write_tree(workdir, {name: textwrap.dedent(text) for name, text in setup.files.items()})
    root = checkout / model_file.root
    # the file's own folder's modules and packages (namespace packages too): the file's
    # side of both runs, not the host's
    project_packages = sorted({path.stem if path.suffix == ".py" else path.name
                               for path in root.iterdir()
                               if path.is_dir() or path.suffix == ".py"}
                              | {model_file.module.partition(".")[0]})
    config: Dict[str, object] = {"module": model_file.module, "entry": model_file.entry,
                                 "mode": "patched", "project_packages": project_packages}
    search = [str(root), *model_project(model_file)]
    patched = _run_child(python, workdir, search, setup, config, timeout)
    run = ModelFileRun(model_file, setup_name, bool(patched["imported"]),
                       str(patched.get("error", "")), str(patched.get("apply_error", "")),
                       str(patched.get("undo_error", "")),
                       list(patched.get("imported_by_apply", [])),  # type: ignore[arg-type]
                       dict(patched.get("patches", {})),  # type: ignore[arg-type]
                       dict(patched.get("targets_not_importable", {})))  # type: ignore[arg-type]
    if not run.imported:
        return run
    baseline_config = dict(config, mode="baseline", modules=patched["modules"])
    baseline = _run_child(python, workdir, search, setup, baseline_config, timeout)
    before: Dict[str, str] = baseline["state"]  # type: ignore[assignment]
    after: Dict[str, str] = patched["state"]  # type: ignore[assignment]
    common = set(patched["modules"]) & set(baseline["modules"])  # type: ignore[arg-type]
    only_patched = set(patched["modules"]) - set(baseline["modules"])  # type: ignore[arg-type]
    said = set(patched.get("said_after_undo", []))  # type: ignore[call-overload]
    for key in set(before) | set(after):
        if key in setup.host_changes:
            continue
        lazy = set(patched.get("lazy_modules", []))  # type: ignore[call-overload]
        if key not in before and (_defined_in(after[key], only_patched)
                                  or key.split(":", 1)[0] in lazy):
            # A class a module registered (or a lazy attribute it filled) where that module
            # imported only with the patcher's stubs in place (the model's project, which
            # needs its flash_attn stub): the import's doing, not a patch's change.
            continue
        if key.split(":", 1)[0] in common and before.get(key) != after.get(key):
            if key.replace(":", ".", 1) in said:
                run.said_leftovers.append(key)   # undone as far as it can be, and said so
                continue
            run.left_changed[key] = (before.get(key), after.get(key))
    return run


def _defined_in(text: Optional[str], modules: "set") -> bool:
    """Whether the class or function ``text`` describes (``describe`` in the runner) is
    defined in one of ``modules`` (a dotted prefix of its path is one), or the module it
    describes is one of them."""
    kind, _, rest = (text or "").partition(" ")
    if kind == "module":   # a submodule bound on its package when it was imported
        return rest in modules
    if kind not in ("class", "function"):
        return False
    parts = rest.split(" ")[0].split(".")
    return any(".".join(parts[:end]) in modules for end in range(len(parts) - 1, 0, -1))
