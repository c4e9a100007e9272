"""`lazypatch report --html`: one self-contained page, opened in a real headless browser.

Real processes write their reports, the real command writes the page, and
Chromium (headless) loads it from disk: ``--dump-dom`` gives the document
after its script ran, ``--screenshot`` a PNG whose size and colours are
checked (the highlighted difference is on screen, not only in the markup).
Without a browser the tests skip and say how to install one; CI sets
CI_REQUIRE_BROWSER=1 (``.ci/run`` installs Chromium), where a missing
browser fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
WINDOW = (1200, 900)
FAILED_FILL = (0xF9, 0xD6, 0xD5)      # .failed background in report_page.STYLE
DIFFERS_OUTLINE = (0xD1, 0x24, 0x2F)  # tr.differs outline

PACKAGES = {
    "demo_target.py": """
        VALUE = 1

        def compute(x):
            return x + 1
    """,
    "demo_patches.py": """
        import os, lazypatch

        def compute_on_device(x):
            # the replacement a reader wants to compare with the original
            return x + 1

        @lazypatch.when_imported("demo_target", name="demo.compute")
        def compute(module, patch):
            '''compute on the device'''
            patch.setattr(module, "compute", compute_on_device)

        @lazypatch.when_imported("demo_target", name="demo.rank_dependent")
        def rank_dependent(module, patch):
            if os.environ.get("RANK") == "2":
                raise RuntimeError("no device on this rank")
            patch.setattr(module, "OTHER", True)
    """,
}


def find_browser() -> Optional[str]:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    if found is None:
        if os.environ.get("CI_REQUIRE_BROWSER"):
            pytest.fail("CI_REQUIRE_BROWSER is set but no headless browser was found "
                        f"(looked for {', '.join(BROWSERS)}); .ci/run installs chromium")
        pytest.skip("no headless browser found (chromium, google-chrome); install one, "
                    "for example: apt-get install -y chromium")
    return found


def run_browser(browser: str, profile: Path, *arguments: str) -> "subprocess.CompletedProcess[str]":
    """Chromium headless with its own profile directory (tests may run side by side)."""
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
         "--no-first-run", f"--user-data-dir={profile}", *arguments],
        capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _write_pages(interpreter, *extra: str) -> Path:
    interpreter.write(PACKAGES)
    for rank in range(4):
        interpreter.run("import warnings; warnings.simplefilter('ignore'); "
                        "import lazypatch.auto, demo_target",
                        env={"RANK": str(rank), "LAZYPATCH_MODULES": "demo_patches",
                             "LAZYPATCH_REPORT": str(interpreter.root / "out" / "r{rank}.json")})
    page = interpreter.root / "page.html"
    result = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", "--html",
                                      str(page), *extra, str(interpreter.root / "out")],
                                     check=False)
    assert f"wrote {page}" in result.stderr
    assert "1 patch differs between processes:" in result.stdout   # the table is printed too
    assert result.returncode == 1     # a patch failed in one process: a job script can stop
    return page


def _rows(dom: str) -> List[List[str]]:
    """The matrix rows as [class, patch, target, cell texts...] from the browser's DOM."""
    matrix = dom.split('id="matrix"', 1)[1].split("</table>", 1)[0]
    rows = []
    for row_class, body in re.findall(r'<tr class="(\w+)[\w -]*">(.*?)</tr>', matrix, re.S):
        cells = [re.sub(r"<[^>]+>", " ", cell).split()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
        rows.append([row_class] + [" ".join(cell) for cell in cells])
    return rows


@pytest.mark.stack   # compares a screenshot with Pillow, from the stack
def test_page_shows_the_matrix_with_the_difference_and_each_patchs_details(
        interpreter, browser, tmp_path):
    page = _write_pages(interpreter, "--diff")
    dom = run_browser(browser, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    assert ("<title>lazypatch report: 4 processes, 2 groups, 1 patch failed, 1 patch differs"
            "</title>") in dom
    # What went wrong opens the page: the failed patch, where, and why, in the row.
    failures = dom.split('id="failures"', 1)[1].split("</table>", 1)[0]
    assert "demo.rank_dependent" in failures and "rank 2" in failures
    assert "RuntimeError: no device on this rank" in failures
    assert dom.index('id="failures"') < dom.index('id="matrix"')
    assert " at 0x" not in dom                   # no object addresses
    # written by the page's script: it ran in the browser
    counted = re.search(r'<span id="counted" class="note">(\d+) of (\d+) patches differ '
                        r'between processes</span>', dom)
    assert counted and counted.group(1) == "1", dom[:3000]
    rows = _rows(dom)
    assert len(rows) == int(counted.group(2))    # the built-in packs' patches are rows too
    # the difference first, then the patches that agree
    assert rows[0] == ["differs", "demo.rank_dependent", "demo_target", "applied",
                       "failed RuntimeError: no device on this rank"]
    assert ["same", "demo.compute", "demo_target", "applied", "applied"] in rows
    assert [row[1] for row in rows if row[0] == "differs"] == ["demo.rank_dependent"]
    assert "ranks 0-1, 3: identical" in dom and "rank 2: identical" in dom
    details = dom.split("<h2>Details</h2>", 1)[1]
    assert "compute on the device" in details
    assert "RuntimeError: no device on this rank" in details and "Traceback" in details
    # the source diff, original against replacement, read from the files
    assert "-def compute(x):" in details and "+def compute_on_device(x):" in details
    assert "+    # the replacement a reader wants to compare with the original" in details

    shot = tmp_path / "page.png"
    run_browser(browser, tmp_path / "profile", f"--screenshot={shot}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image
    with Image.open(shot) as image:
        assert image.size == WINDOW
        colours = {colour for _, colour in image.convert("RGB").getcolors(WINDOW[0] * WINDOW[1])}
    assert len(colours) > 20, "an empty page"
    for expected in (FAILED_FILL, DIFFERS_OUTLINE):
        assert any(max(abs(a - b) for a, b in zip(colour, expected)) <= 6 for colour in colours), \
            f"colour {expected} not on screen"


def test_page_is_self_contained_and_filters_to_the_differences(interpreter, browser, tmp_path):
    page = _write_pages(interpreter)
    text = page.read_text()
    for outside in ("http:", "https:", "<link", " src=", "@import", "url("):
        assert outside not in text, outside
    dom = run_browser(browser, tmp_path / "profile", "--dump-dom",
                      page.as_uri() + "#differences").stdout
    assert re.search(r'<body class="[^"]*only-differences[^"]*"[^>]*>', dom), dom[:2000]
    # Four processes: the page opens on the differences without being asked, and the
    # patches that cannot apply on these hosts (the Ascend pack here) are hidden.
    opened = run_browser(browser, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    assert re.search(r'<body class="hide-cannot only-differences"[^>]*>', opened), opened[:2000]
    assert "source diff" not in dom     # diffs only on demand (--diff)


CUDA_PROGRAM = {
    "train_cuda.py": """
        import torch
        model = torch.nn.Linear(4, 2).cuda()
        for step in range(3):
            batch = torch.randn(8, 4).cuda()
            loss = model(batch).sum()
        print("trained on", batch.device)
    """,
    "long_named_patches.py": """
        import lazypatch

        @lazypatch.when_imported(
            "torch", name="a_team_with_a_long_prefix.numerics.optimisers.fused_adam_for_the_"
                          "cluster_that_has_no_such_kernel")
        def breaks(torch, patch):
            raise RuntimeError("the fused kernel library is not installed on this host")
    """,
}


@pytest.mark.stack   # the device pack on the real torch
def test_single_process_page_shows_what_ran_where_and_fits_1280_pixels(
        interpreter, browser, tmp_path):
    interpreter.write(CUDA_PROGRAM)
    report = interpreter.root / "report.json"
    interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "run", "--enable", "device",
         "--modules", "long_named_patches", "--report", str(report), "--",
         sys.executable, "train_cuda.py"])
    page = interpreter.root / "page.html"
    text = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", "--html",
                                    str(page), str(report)], check=False).stdout
    # The text report has the section too, with the user's first line.
    section = text.splitlines()[text.splitlines().index("what ran where:") + 1:]
    assert any(line.split()[:5] == ["Tensor.cuda", "cpu", "(asked", "for", "cuda)"]
               and line.split()[5:] == ["3", "train_cuda.py:5", "device", "pack"]
               for line in section if line.strip()), text
    dom = run_browser(browser, tmp_path / "profile", "--window-size=1280,900", "--dump-dom",
                      page.as_uri()).stdout
    assert "<title>lazypatch report: 1 process (pid " in dom and "1 patch failed" in dom
    assert "Groups of identical processes" not in dom and 'id="groups"' not in dom
    usage = dom.split('id="usage"', 1)[1].split("</table>", 1)[0]
    assert "Tensor.cuda" in usage and "cpu (asked for cuda)" in usage
    assert "Module.cuda" in usage
    # What went wrong first, then what ran where, then the patches.
    assert dom.index('id="failures"') < dom.index('id="usage"') < dom.index('id="matrix"')
    # Written by the page's script after layout: no horizontal scrollbar at 1280 px,
    # although the failed patch's name is 100 characters long.
    assert re.search(r'<body [^>]*data-fits-width="yes"', dom), dom[:1500]
