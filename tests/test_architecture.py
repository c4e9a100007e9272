"""The engine's shape holds: no import cycles, no engine module importing the facade,
the pack boundary enforced by the linter, state in one home."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
ENGINE = REPOSITORY / "lazypatch"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPOSITORY).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _engine_imports() -> "dict[str, set[str]]":
    """module -> engine modules it imports anywhere (type-checking-only imports excluded)."""
    modules = {_module_name(path): path for path in ENGINE.rglob("*.py")}
    graph: "dict[str, set[str]]" = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        type_checking = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                    and node.test.id == "TYPE_CHECKING":
                type_checking.update(id(child) for child in ast.walk(node))
        found = set()
        for node in ast.walk(tree):
            if id(node) in type_checking:
                continue
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
        graph[name] = {item for item in found if item in modules and item != name}
    return graph


def test_the_engine_has_no_import_cycles():
    graph = _engine_imports()
    # The facade imports everything; the question is the graph beneath it.
    graph.pop("lazypatch", None)
    for edges in graph.values():
        edges.discard("lazypatch")
    visiting, done, cycles = set(), set(), []

    def visit(node, trail):
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
    assert cycles == [], f"import cycles in lazypatch/: {cycles}"


def test_no_engine_module_imports_the_public_facade():
    importers = sorted(name for name, edges in _engine_imports().items()
                       if "lazypatch" in edges and name not in ("lazypatch", "lazypatch.auto"))
    assert importers == [], f"engine modules importing lazypatch/__init__.py: {importers}"


@pytest.mark.stack
def test_the_linter_refuses_an_engine_import_in_a_pack():
    ruff = Path(sys.executable).with_name("ruff")
    bad = "from lazypatch.state import STATE\n\nprint(STATE)\n"
    result = subprocess.run([str(ruff), "check", "--stdin-filename", "registry/example_pack.py", "-"],
                            input=bad, capture_output=True, text=True, cwd=REPOSITORY)
    assert result.returncode == 1 and "TID251" in result.stdout, result.stdout + result.stderr
    good = "import lazypatch\n\nprint(lazypatch.report())\n"
    result = subprocess.run([str(ruff), "check", "--stdin-filename", "registry/example_pack.py", "-"],
                            input=good, capture_output=True, text=True, cwd=REPOSITORY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_engine_comments_point_only_at_files_that_exist():
    for path in ENGINE.rglob("*.py"):
        text = path.read_text()
        for missing in ("DESIGN.md", "ANCHORS.md", "/tmp/", "/home/", "/work/"):
            assert missing not in text, f"{path.relative_to(REPOSITORY)} mentions {missing!r}"
        if "benchmarks/COSTS.md" in text:
            assert (REPOSITORY / "benchmarks" / "COSTS.md").is_file()
