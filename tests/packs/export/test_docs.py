"""Every code block of docs/export.md, run as written.

Each ``python`` block starts with a ``# name.py`` line and is saved under that name in
a fresh directory; a block followed by a ``text`` block is run there (``python
name.py``) and must print exactly the lines shown, with nothing on stderr. The page
shows transformers 5.x (the main stack's); on another major version the run is skipped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="the export pack needs transformers "
                                   "(pip install -r requirements/export.txt)")
pytestmark = pytest.mark.stack

PAGE = Path(__file__).resolve().parents[3] / "docs" / "export.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def page_blocks():
    return BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def programs():
    """(file name, expected output lines) of every python block a text block follows."""
    found = []
    blocks = page_blocks()
    for (language, body), (next_language, next_body) in zip(blocks, blocks[1:] + [("", "")]):
        if language == "python" and next_language == "text":
            found.append((body.splitlines()[0][2:].strip(), next_body.splitlines()))
    return found


def test_every_python_block_is_a_named_file():
    for language, body in page_blocks():
        if language == "python":
            first = body.splitlines()[0]
            assert first.startswith("# ") and first.endswith(".py"), first
            compile(body, first, "exec")


@pytest.mark.parametrize("name, expected", programs(), ids=[name for name, _ in programs()])
def test_block_prints_what_the_page_shows(tmp_path, name, expected):
    if int(transformers.__version__.split(".")[0]) != 5:
        pytest.skip(f"docs/export.md shows transformers 5.x; this is {transformers.__version__}")
    for language, body in page_blocks():
        if language == "python":
            (tmp_path / body.splitlines()[0][2:].strip()).write_text(body, encoding="utf-8")
    completed = subprocess.run([sys.executable, name], cwd=tmp_path, capture_output=True,
                               text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert completed.stdout.splitlines() == expected, completed.stdout
    assert completed.stderr == "", completed.stderr[-4000:]
