"""Every code block of the README, run as a newcomer would run it.

Python blocks that start with a ``# name.py`` line are written to that file in a fresh
directory; ``console`` blocks are run there line by line (``$ command``) and what each
command prints must be the lines shown under it, with nothing on stderr. Numbers with a decimal point (the
report's milliseconds) are compared as "a number", process ids as "a pid". The two ``bash`` blocks are the
install line (the wheel it builds is checked by tests/project/test_packaging.py) and the two
commands of a fresh machine (CI runs ``./dev test``; tests/project/test_demo.py runs the demo).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
DECIMAL = re.compile(r"\b\d+\.\d+\b")
PROCESS_ID = re.compile(r"(?<=pid )\d+|\b\d+(?=\.json)")


def blocks(language: str):
    return [body for found, body in BLOCK.findall(README.read_text(encoding="utf-8"))
            if found == language]


def sessions():
    """Each console block as [(command, expected output lines)]."""
    result = []
    for body in blocks("console"):
        steps = []
        for line in body.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
        result.append(steps)
    return result


def normalised(lines):
    return [PROCESS_ID.sub("<pid>", DECIMAL.sub("<number>", line.rstrip()))
            for line in lines if line.strip()]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A directory holding the README's files, as a newcomer would save them."""
    directory = tmp_path_factory.mktemp("readme")
    written = []
    for body in blocks("python"):
        first = body.splitlines()[0]
        name = first[2:].strip() if first.startswith("# ") else ""
        if not name.endswith(".py"):
            continue
        (directory / name).write_text(body, encoding="utf-8")
        written.append(name)
    assert {"mypatches.py", "train.py", "undo.py"} <= set(written), written
    return directory


def test_every_python_block_compiles():
    for body in blocks("python"):
        compile(body, "<README block>", "exec")


# The README shows the output on the development stack (its report names mmcv-lite...).
@pytest.mark.stack
@pytest.mark.parametrize("index", range(len(sessions())))
def test_console_block_prints_what_the_readme_shows(project, index):
    environment = dict(os.environ)
    # The venv's `python` and `lazypatch` first, as for a user whose venv is active.
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment.get("PATH", "")
    for variable in [name for name in environment if name.startswith("LAZYPATCH")]:
        del environment[variable]
    for command, expected in sessions()[index]:
        result = subprocess.run(["bash", "-c", command], cwd=project, env=environment,
                                capture_output=True, text=True, timeout=300)
        shown = result.stdout.splitlines()
        assert normalised(shown) == normalised(expected), (
            f"README command {command!r} printed:\n{result.stdout}{result.stderr}")
        # What the README does not show, the newcomer must not see either.
        assert result.stderr == "", f"README command {command!r} wrote to stderr:\n{result.stderr}"
