"""The contract every pack of the catalog passes, as dd-trace-py's ``PatchTestCase`` is
run over every integration: a new pack is covered by adding nothing but the pack.

For each pack that ``lazypatch.registry.pack_names()`` lists:

- its ``__init__.py`` begins with the declarations in the one fixed form (``PACK``,
  ``TAGS``, ``OPT_IN``, ``TARGETS``, ``REQUIRES``), and the catalog's ``OPT_IN`` agrees;
- declaring it (importing the pack, in a fresh interpreter) imports none of its
  targets nor its requirements; every patch it registers is named ``<PACK>.<patch>``,
  carries the pack's ``TAGS``, watches a module of ``TARGETS``, requires ``REQUIRES``
  and, in an opt-in pack, is off by default;
- every order of import / enable / disable / unpatch ends where it started: after the
  last ``unpatch`` the target modules hold exactly what they held unpatched (the same
  objects, when they were imported before the patches), no module a patch provided is
  left in ``sys.modules``, a disabled pack changes nothing, enabling twice patches once,
  unpatching twice is a no-op, and re-enabling after an unpatch applies again; the
  written report lists every patch, none ``failed``.

The orders import every target module of the pack's patches that this environment can
import: installed packages for real, and those that are not installed (flash_attn,
torch_npu, mx_driving, ...) as the pack's own stand-ins where it provides them. A pack
whose patches all require something missing here (``ascend`` needs torch_npu and
DrivingSDK) is checked on declaration and on "nothing applies, nothing changes" only:
its patches report ``skipped``. One fresh interpreter per pack per order; the orders of
packs whose targets include the heavy stack (torch, OpenMMLab, transformers) are
marked slow.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPOSITORY, clean_environment

try:
    import lazypatch.registry as catalog
except ImportError:   # a checkout without the installed layout
    import registry as catalog

REGISTRY = Path(catalog.__file__).resolve().parent
PACKS = catalog.pack_names()
DECLARATIONS = ("PACK", "TAGS", "OPT_IN", "TARGETS", "REQUIRES")
# Importing any of these costs seconds: a pack watching them has its orders marked slow.
HEAVY_TARGETS = {"torch", "mmcv", "mmdet", "mmdet3d", "mmengine", "mmseg", "transformers",
                 "torchvision"}

# Run in a fresh interpreter: argv = pack, order, report path. Prints one JSON document.
SCENARIO = r'''
import importlib, json, sys

pack_name, order, report_path = sys.argv[1:4]
before = set(sys.modules)
import lazypatch
pack = importlib.import_module(f"lazypatch.registry.{pack_name}")
declared_imports = sorted(set(sys.modules) - before)
records = [record for record in lazypatch.report()
           if record["source"] == pack.__name__ or record["name"].startswith(pack_name + ".")]
names = [record["name"] for record in records]
targets = sorted({record["target"] for record in records})
result = {"declared_imports": declared_imports,
          "patches": [{key: record[key] for key in ("name", "target", "phase", "tags",
                                                     "requires", "enabled_by_default")}
                      for record in records]}


def import_targets():
    failed = {}
    for target in targets:
        try:
            importlib.import_module(target)
        except Exception as error:   # not installed here, or not importable on its own
            failed[target] = type(error).__name__
    return failed


def describe(value):
    """What a value is, comparable across processes: its type and, for code and
    classes, the name it was defined under."""
    value = getattr(value, "__func__", value)   # staticmethod, classmethod
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    name = getattr(value, "__qualname__", None) if callable(value) else None
    return f"{kind} {getattr(value, '__module__', '')}.{name}" if isinstance(name, str) else kind


def namespace(module):
    """name -> description of a module's attributes and of its own classes' attributes.
    Submodule bindings are left out: patches import submodules as a side effect."""
    found = {}
    for name, value in list(vars(module).items()):
        if type(value).__name__ == "module":
            continue
        found[name] = describe(value)
        if isinstance(value, type) and value.__module__ == module.__name__:
            for member, inner in list(vars(value).items()):
                found[f"{name}.{member}"] = describe(inner)
    return found


def fingerprint():
    """target -> its namespace, or "absent"; and the modules a patch provided."""
    modules = {target: namespace(sys.modules[target]) if target in sys.modules else "absent"
               for target in targets}
    provided = sorted(name for name, module in list(sys.modules.items())
                      if any(key.startswith("__lazypatch_") for key in
                             list(getattr(module, "__dict__", {}))))
    return {"modules": modules, "provided": provided}


def identities():
    return {target: dict(vars(sys.modules[target])) for target in targets
            if target in sys.modules}


def same_objects(saved):
    """Names whose object is not the very one saved (or that appeared or went)."""
    differing = []
    for target, before in saved.items():
        now = vars(sys.modules[target])
        for name in set(before) | set(now):
            if name in before and name in now and before[name] is now[name]:
                continue
            if type(before.get(name, now.get(name))).__name__ == "module":
                continue   # a submodule bound by an import
            differing.append(f"{target}.{name}")
    return sorted(differing)


def statuses():
    return {record["name"]: record["status"] for record in lazypatch.report()
            if record["name"] in names}


def applications_of():
    return {record["name"]: record["applications"] for record in lazypatch.report()
            if record["name"] in names}


def unpatch():
    for name in reversed(names):
        lazypatch.unpatch(name)


if order == "declare":
    pass
elif order == "enable-disable-import":
    lazypatch.enable(*names)
    lazypatch.disable(*names)
    result["import_failed"] = import_targets()
    result["statuses"] = statuses()
    result["final"] = fingerprint()
elif order == "import-enable-unpatch":
    lazypatch.disable(*names)
    result["import_failed"] = import_targets()
    saved = identities()
    lazypatch.enable(*names)
    result["applied"] = statuses()
    patched, applications = fingerprint(), applications_of()
    lazypatch.enable(*names)   # again: idempotent, nothing applied twice
    result["enabled_twice_changed"] = (fingerprint() != patched
                                       or applications_of() != applications)
    unpatch()
    result["statuses"] = statuses()
    result["not_restored"] = same_objects(saved)
    unpatch()   # again: a no-op
    result["not_restored"] += same_objects(saved)
    result["final"] = fingerprint()
elif order == "enable-import-unpatch-enable-unpatch":
    lazypatch.enable(*names)
    result["import_failed"] = import_targets()
    result["applied"] = statuses()
    unpatch()
    result["first_undo"] = fingerprint()
    lazypatch.enable(*names)
    import_targets()   # a module a patch provided went with its undo: imported anew
    result["reapplied"] = statuses()
    unpatch()
    result["statuses"] = statuses()
    result["final"] = fingerprint()
lazypatch.write_report(report_path)
print(json.dumps(result))
'''

ORDERS = ("enable-disable-import", "import-enable-unpatch", "enable-import-unpatch-enable-unpatch")


def run(pack: str, order: str, tmp_path: Path) -> dict:
    script = tmp_path / "contract.py"
    script.write_text(SCENARIO)
    report = tmp_path / "report.json"
    environment = clean_environment()
    environment["PYTHONPATH"] = str(REPOSITORY)
    result = subprocess.run([sys.executable, str(script), pack, order, str(report)],
                            cwd=tmp_path, capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0, f"{pack} {order}:\n{result.stderr[-4000:]}"
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    outcome["report"] = json.loads(report.read_text())
    return outcome


def declarations(pack: str) -> dict:
    """The pack's declarations, read from the top of its ``__init__.py`` as the fixed form
    requires: the first statements after the docstring (and ``from __future__``)."""
    path = REGISTRY / pack / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body.pop(0)
    while body and isinstance(body[0], ast.ImportFrom) and body[0].module == "__future__":
        body.pop(0)
    head = body[:len(DECLARATIONS)]
    found = [statement.targets[0].id for statement in head
             if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)]
    assert found == list(DECLARATIONS), (
        f"registry/{pack}/__init__.py must begin (after its docstring) with {DECLARATIONS} "
        f"in that order, as every pack does (docs/writing_packs.md); it begins with {found}")
    values: dict = {}
    for statement in head:
        # Values are literals, TAGS may name PACK: evaluated with nothing else in reach.
        exec(compile(ast.Module([statement], []), str(path), "exec"), {"__builtins__": {}},
             values)
    return values


def heavy(pack: str) -> bool:
    return bool(HEAVY_TARGETS & set(declarations(pack)["TARGETS"]))


def test_the_catalog_lists_every_pack_folder():
    folders = sorted(path.parent.name for path in REGISTRY.glob("*/__init__.py")
                     if not path.parent.name.startswith("_"))
    assert PACKS == [folder for folder in folders if folder != catalog.SHARED]
    assert PACKS, "the catalog lists no pack"
    # pack_names() takes every entry without a dot for a package (no file looked at).
    strays = [entry.name for entry in REGISTRY.iterdir() if "." not in entry.name
              and not entry.name.startswith("_") and not (entry / "__init__.py").is_file()]
    assert not strays, f"registry/ holds {strays}: a pack is a package (with __init__.py)"


@pytest.mark.parametrize("pack", PACKS)
def test_declarations_are_the_fixed_form(pack):
    values = declarations(pack)
    assert values["PACK"] == pack, f"registry/{pack}: PACK must be the folder's name"
    tags, targets, requires = values["TAGS"], values["TARGETS"], values["REQUIRES"]
    assert isinstance(tags, tuple) and tags[:1] == (pack,) and all(
        isinstance(tag, str) for tag in tags), f"registry/{pack}: TAGS is (PACK, ...) of strings"
    assert isinstance(values["OPT_IN"], bool)
    assert isinstance(targets, tuple) and targets and all(
        isinstance(target, str) and target and "." not in target for target in targets), (
        f"registry/{pack}: TARGETS is a tuple of top-level module names")
    assert isinstance(requires, tuple) and all(isinstance(item, str) for item in requires)
    assert (pack in catalog.OPT_IN) == values["OPT_IN"], (
        f"registry/{pack} declares OPT_IN = {values['OPT_IN']}: "
        f"{'add it to' if values['OPT_IN'] else 'remove it from'} OPT_IN in "
        f"registry/__init__.py (activation reads that list so as to open no pack)")


@pytest.mark.stack
def test_the_shared_room_registers_no_patch(tmp_path):
    """Importing every module of ``shared/`` registers nothing (its kernels import torch:
    that is allowed; registering another pack's patches is not)."""
    modules = sorted(
        "lazypatch.registry." + ".".join(path.relative_to(REGISTRY).with_suffix("").parts)
        .removesuffix(".__init__")
        for path in (REGISTRY / catalog.SHARED).rglob("*.py"))
    script = tmp_path / "shared.py"
    script.write_text("import importlib, json, lazypatch\n"
                      f"for name in {modules!r}:\n    importlib.import_module(name)\n"
                      "print(json.dumps([record['name'] for record in lazypatch.report()]))\n")
    environment = clean_environment()
    environment["PYTHONPATH"] = str(REPOSITORY)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_no_pack_imports_another_packs_modules():
    """A pack reaches another pack only through the public API (patch names, selectors);
    code two packs need lives in ``shared/``."""
    offences = []
    for pack in PACKS:
        for path in sorted((REGISTRY / pack).rglob("*.py")):
            package = ["registry", *path.relative_to(REGISTRY).parent.parts]
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    base = package[:len(package) - node.level + 1]
                    absolute = base + (node.module.split(".") if node.module else
                                       [node.names[0].name])
                elif isinstance(node, ast.ImportFrom):
                    absolute = ["registry", *(node.module or "").split(".")[2:]] \
                        if (node.module or "").startswith("lazypatch.registry.") else []
                elif isinstance(node, ast.Import):
                    absolute = next((["registry", *alias.name.split(".")[2:]]
                                     for alias in node.names
                                     if alias.name.startswith("lazypatch.registry.")), [])
                else:
                    continue
                reached = absolute[1] if len(absolute) > 1 else None
                if reached in PACKS and reached != pack:
                    offences.append(f"{path.relative_to(REGISTRY)}:{node.lineno} imports "
                                    f"the {reached} pack")
    assert not offences, "\n".join(offences)


@pytest.mark.parametrize("pack", PACKS)
def test_declaring_imports_no_target_and_names_every_patch_under_the_pack(pack, tmp_path):
    values = declarations(pack)
    outcome = run(pack, "declare", tmp_path)
    forbidden = set(values["TARGETS"]) | {requirement.split("<")[0].split(">")[0].split("=")[0]
                                         .split("!")[0].split("~")[0].strip()
                                         for requirement in values["REQUIRES"]}
    imported = [name for name in outcome["declared_imports"]
                if name.split(".")[0] in forbidden]
    assert not imported, f"declaring {pack} imported its targets: {imported}"
    patches = outcome["patches"]
    assert patches, f"{pack} registers no patch"
    for patch in patches:
        name = patch["name"]
        assert name.startswith(pack + "."), f"{name} is not named under its pack {pack!r}"
        assert set(values["TAGS"]) <= set(patch["tags"]), f"{name} lacks the tags {values['TAGS']}"
        assert patch["target"].split(".")[0] in values["TARGETS"], (
            f"{name} watches {patch['target']}, outside {pack}'s TARGETS {values['TARGETS']}")
        assert set(values["REQUIRES"]) <= set(patch["requires"]), (
            f"{name} requires {patch['requires']}, not all of REQUIRES {values['REQUIRES']}")
        if values["OPT_IN"]:
            assert not patch["enabled_by_default"], f"{name} is on in the opt-in pack {pack}"
    reported = {record["name"] for record in outcome["report"]["patches"]}
    assert {patch["name"] for patch in patches} <= reported


def _orders():
    for pack in PACKS:
        marks = [pytest.mark.slow, pytest.mark.stack] if heavy(pack) else [pytest.mark.stack]
        for order in ORDERS:
            yield pytest.param(pack, order, marks=marks, id=f"{pack}-{order}")


@pytest.mark.parametrize("pack, order", list(_orders()))
def test_every_order_of_import_enable_disable_unpatch_ends_unpatched(pack, order, tmp_path,
                                                                     tmp_path_factory):
    outcome = run(pack, order, tmp_path)
    names = [patch["name"] for patch in outcome["patches"]]
    final = outcome["statuses"]
    assert "applied" not in final.values(), f"{pack} {order}: still applied: {final}"
    reported = {record["name"]: record for record in outcome["report"]["patches"]}
    assert set(names) <= set(reported), f"the report leaves out {set(names) - set(reported)}"
    failed = {name: reported[name]["error"][-600:] for name in names
              if reported[name]["status"] == "failed"}
    assert not failed, f"{pack} {order}: patches failed: {failed}"
    assert not outcome["final"]["provided"], (
        f"{pack} {order}: modules a patch provided are left: {outcome['final']['provided']}")
    if order == "enable-disable-import":
        # Nothing applies when the pack is off: this is the unpatched state the others end in.
        assert set(final.values()) <= {"disabled", "pending", "skipped"}, final
        _BASELINES[pack] = outcome
        return
    baseline = _baseline(pack, tmp_path_factory)
    if order == "import-enable-unpatch":
        assert not outcome["enabled_twice_changed"], f"{pack}: enabling twice patched twice"
        assert not outcome["not_restored"], (
            f"{pack}: unpatch did not restore the very objects: {outcome['not_restored']}")
    else:
        assert not _leftovers(outcome["first_undo"], baseline["final"]), (
            f"{pack}: the first unpatch left {_leftovers(outcome['first_undo'], baseline['final'])}")
        # A patch that runs after its target's body applies again to the module still
        # imported; one that runs before the body cannot (the body has run).
        after_body = {patch["name"] for patch in outcome["patches"] if patch["phase"] == "after"}
        applied = {name for name, status in outcome["applied"].items() if status == "applied"}
        reapplied = {name for name, status in outcome["reapplied"].items() if status == "applied"}
        assert applied & after_body <= reapplied, (
            f"{pack}: enabling after unpatch did not apply {sorted(applied & after_body - reapplied)}")
    assert not _leftovers(outcome["final"], baseline["final"]), (
        f"{pack} {order}: after unpatch the target modules differ from unpatched: "
        f"{_leftovers(outcome['final'], baseline['final'])}")


# pack -> the outcome of "enable-disable-import": the unpatched state, run once per pack.
_BASELINES: dict = {}


def _baseline(pack: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    if pack not in _BASELINES:
        _BASELINES[pack] = run(pack, "enable-disable-import", tmp_path_factory.mktemp(pack))
    return _BASELINES[pack]


def _leftovers(after: dict, unpatched: dict) -> list:
    """What unpatching left different from the never-patched state: an attribute changed
    or gone, or a new one made by lazypatch (or wrapt). New attributes of the library's
    own are not leftovers: a module a patch let import (``mmcv.ops`` on mmcv's pure-PyTorch
    ``_ext``) stays imported, as any import does, and binds the library's own names."""
    lines = [f"provided module left: {name}" for name in after["provided"]]
    for target, now in sorted(after["modules"].items()):
        before = unpatched["modules"].get(target, "absent")
        if before == "absent" or now == "absent":
            before, now = ({} if before == "absent" else before), ({} if now == "absent" else now)
        for name in sorted(set(now) | set(before)):
            if name not in now:
                lines.append(f"{target}.{name} is gone")
            elif name not in before:
                if "lazypatch" in now[name] or "wrapt" in now[name]:
                    lines.append(f"{target}.{name} is new: {now[name]}")
            elif now[name] != before[name]:
                lines.append(f"{target}.{name}: {before[name]} -> {now[name]}")
    return lines[:30]
