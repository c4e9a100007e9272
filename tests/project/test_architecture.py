"""The engine's shape holds: no import cycles (type-level imports included) in
lazypatch/ and registry/, no engine module importing the facade, state.py at the bottom,
packs on the public API only, state in one home."""

from __future__ import annotations

import ast
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
ENGINE = REPOSITORY / "lazypatch"
PACKS = REPOSITORY / "registry"

# The engine modules a pack (registry/, or a third party's) may import or name: the
# facade, and the modules docs/ documents as public. Every other engine module,
# including one added tomorrow, is private to the engine (`lazypatch.auto` is public
# too, but a pack must not activate lazypatch).
PUBLIC_FOR_PACKS = ("lazypatch", "lazypatch.driving_sdk.mx_driving", "lazypatch.driving_sdk.v2.patcher",
                    "lazypatch.integrations.dask", "lazypatch.integrations.ray")


def _module_name(path: Path, root: Path, package: str) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> "dict[str, Path]":
    """Every module of the engine and of the packs (as installed: lazypatch.registry.*)."""
    found = {_module_name(path, ENGINE, "lazypatch"): path for path in ENGINE.rglob("*.py")}
    found.update({_module_name(path, PACKS, "lazypatch.registry"): path
                  for path in PACKS.rglob("*.py")})
    return found


def imports_of(name: str, source: str, is_package: bool) -> "set[str]":
    """Every dotted name module ``name`` imports, anywhere in it (inside functions and
    under ``if TYPE_CHECKING:`` too: a type-level arrow is an arrow)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if node.module:   # `from . import x` names submodules, not the package's body
                found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _import_graph() -> "dict[str, set[str]]":
    """module -> the modules of lazypatch/ and registry/ it imports."""
    modules = _modules()
    return {name: {item for item in imports_of(name, path.read_text(), path.name == "__init__.py")
                   if item in modules and item != name}
            for name, path in modules.items()}


def _cycles(graph: "dict[str, set[str]]") -> "list[list[str]]":
    visiting: "set[str]" = set()
    done: "set[str]" = set()
    cycles: "list[list[str]]" = []

    def visit(node: str, trail: "list[str]") -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(trail[trail.index(node):] + [node])
            return
        visiting.add(node)
        for target in sorted(graph.get(node, ())):
            visit(target, trail + [node])
        visiting.discard(node)
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return cycles


def test_no_import_cycles_in_the_engine_or_the_packs_type_level_included():
    graph = _import_graph()
    # The facade imports everything on demand; the question is the graph beneath it.
    graph.pop("lazypatch", None)
    for edges in graph.values():
        edges.discard("lazypatch")
    assert _cycles(graph) == [], f"import cycles: {_cycles(graph)}"


def test_the_cycle_check_finds_a_type_level_circle():
    source = {"pkg.low": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg.high import X\n",
              "pkg.high": "from pkg.low import Y\n"}
    graph = {name: imports_of(name, text, False) & set(source) for name, text in source.items()}
    assert _cycles(graph) == [["pkg.high", "pkg.low", "pkg.high"]]


def test_state_is_the_bottom_floor():
    # Not even under TYPE_CHECKING: the owners of the ledger, event rules and
    # requirements put them into STATE; state.py names none of them.
    assert _import_graph()["lazypatch.state"] == set()


def test_no_engine_module_imports_the_public_facade():
    importers = sorted(name for name, edges in _import_graph().items()
                       if name.startswith("lazypatch.") and not name.startswith("lazypatch.registry")
                       and "lazypatch" in edges and name != "lazypatch.auto")
    assert importers == [], f"engine modules importing lazypatch/__init__.py: {importers}"


def private_references(pack_sources: "dict[str, str]", engine_modules: "set[str]"
                       ) -> "list[tuple[str, str]]":
    """(pack module, engine module) for every import of, or string naming, an engine
    module that is not public: derived from the module list, so a new engine module is
    private without editing any rule."""
    private = {name for name in engine_modules if name not in PUBLIC_FOR_PACKS}
    found = []
    for name, source in sorted(pack_sources.items()):
        named = imports_of(name, source, False)
        named |= {node.value for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        found += [(name, item) for item in sorted(named & private)]
    return found


def test_packs_name_no_private_engine_module():
    modules = _modules()
    engine = {name for name in modules
              if name == "lazypatch" or not name.startswith("lazypatch.registry")}
    packs = {name: path.read_text() for name, path in modules.items()
             if name.startswith("lazypatch.registry")}
    assert private_references(packs, engine) == []
    # Every public module exists and is documented.
    documented = "\n".join(path.read_text() for path in (REPOSITORY / "docs").glob("*.md"))
    for name in PUBLIC_FOR_PACKS:
        assert name in engine, name
        assert f"`{name}" in documented, f"{name} is public but docs/ do not name it"


def test_the_pack_check_refuses_a_private_import_and_a_private_name():
    engine = {"lazypatch", "lazypatch.state", "lazypatch.driving_sdk.mx_driving", "lazypatch.new_module"}
    bad = {"lazypatch.registry.example": "from lazypatch.state import STATE\n"
                                         "import lazypatch.new_module\n"
                                         "TARGET = 'lazypatch.state'\n"}
    assert private_references(bad, engine) == [
        ("lazypatch.registry.example", "lazypatch.new_module"),
        ("lazypatch.registry.example", "lazypatch.state")]
    good = {"lazypatch.registry.example": "import lazypatch\n"
                                          "from lazypatch.driving_sdk.mx_driving import Patch\n"}
    assert private_references(good, engine) == []


def test_the_layout_in_the_architecture_page_names_every_folder_and_module():
    page = (REPOSITORY / "docs" / "architecture.md").read_text()
    tree = page.split("## The layout", 1)[1].split("```", 2)[1]
    words = set(tree.replace(",", " ").split())
    for folder in sorted(path for path in ENGINE.iterdir()
                         if path.is_dir() and (path / "__init__.py").is_file()):
        assert f"{folder.name}/" in words, f"docs/architecture.md's layout lacks {folder.name}/"
        if folder.name in ("integrations", "driving_sdk"):   # described in their own pages
            continue
        for module in sorted(folder.glob("*.py")):
            if module.stem != "__init__":
                assert module.stem in words, f"docs/architecture.md's layout lacks {module}"
    for module in sorted(ENGINE.glob("*.py")):
        assert module.name in words, f"docs/architecture.md's layout lacks {module.name}"


def test_engine_comments_point_only_at_files_that_exist():
    for path in ENGINE.rglob("*.py"):
        text = path.read_text()
        for missing in ("DESIGN.md", "ANCHORS.md", "/tmp/", "/home/", "/work/"):
            assert missing not in text, f"{path.relative_to(REPOSITORY)} mentions {missing!r}"
        if "benchmarks/COSTS.md" in text:
            assert (REPOSITORY / "benchmarks" / "COSTS.md").is_file()

