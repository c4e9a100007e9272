"""Shared fixtures: real packages written to disk, imported in a fresh interpreter.

Import semantics cannot be tested by editing ``sys.modules`` in the test
process: each scenario writes its modules to a temporary directory and runs
a new ``python`` on them, so the finder, the import locks and the loaders
are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


def write_tree(root: Path, files: Mapping[str, str]) -> None:
    """Write ``{"pkg/__init__.py": "source", ...}`` under ``root`` (dedented)."""
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def clean_environment(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The test process's environment without any LAZYPATCH_* setting."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("LAZYPATCH") and key not in ("PYTHONPATH",)}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    environment["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if extra:
        environment.update(extra)
    return environment


class Interpreter:
    """Runs Python code in a fresh interpreter with a temporary directory on sys.path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, files: Mapping[str, str]) -> "Interpreter":
        write_tree(self.root, files)
        return self

    def run(self, code: str, *, env: Optional[Mapping[str, str]] = None,
            args: Sequence[str] = (), check: bool = True, timeout: float = 120,
            python_args: Sequence[str] = ()) -> subprocess.CompletedProcess:
        """Run ``code`` (dedented) as a script; fail the test with its output if it fails."""
        script = self.root / "_scenario.py"
        script.write_text(textwrap.dedent(code))
        return self.run_command([sys.executable, *python_args, str(script), *args],
                                env=env, check=check, timeout=timeout)

    def run_command(self, command: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                    check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        environment = clean_environment(env)
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(self.root)] + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else []))
        result = subprocess.run(list(command), cwd=self.root, env=environment,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            pytest.fail(f"command failed with exit code {result.returncode}: {command}\n"
                        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}")
        return result

    def run_json(self, code: str, **kwargs) -> object:
        """Run ``code``, which must print one JSON document as its last stdout line."""
        result = self.run(code, **kwargs)
        lines = [line for line in result.stdout.splitlines() if line.strip()]
        assert lines, f"no output; stderr:\n{result.stderr}"
        return json.loads(lines[-1])


@pytest.fixture
def interpreter(tmp_path: Path) -> Interpreter:
    """A fresh-interpreter runner rooted at a temporary directory."""
    return Interpreter(tmp_path)
