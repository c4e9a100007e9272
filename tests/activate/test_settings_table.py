"""One declaration per setting: the environment variable, the TOML key and the
`lazypatch run` flag come from it, and docs/settings.md's table and `run --help`
say exactly what it declares."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPOSITORY

SETTINGS_PAGE = REPOSITORY / "docs" / "settings.md"
BEGIN = ("<!-- the settings table: tests/activate/test_settings_table.py checks it "
         "against the declarations -->")
END = "<!-- end of the settings table -->"


def declared_rows():
    """settings_rows() computed in a fresh interpreter (it imports every pack)."""
    code = ("import json; from lazypatch.cli.main import settings_rows; "
            "print(json.dumps(settings_rows()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=300, cwd=REPOSITORY)
    import json
    return [tuple(row) for row in json.loads(result.stdout.splitlines()[-1])]


def render(rows) -> str:
    def cell(text: str) -> str:
        return f"`{text}`" if text else ""
    lines = ["| variable | TOML key | `lazypatch run` flag | of | meaning |",
             "|---|---|---|---|---|"]
    for variable, key, flag, meaning, owner in rows:
        lines.append(f"| {cell(variable)} | {cell(key)} | {cell(flag)} | {owner} | "
                     f"{meaning.replace('|', '/')} |")
    return "\n".join(lines)


def test_the_settings_page_lists_every_declared_setting_with_its_key_and_flag():
    expected = render(declared_rows())
    page = SETTINGS_PAGE.read_text(encoding="utf-8")
    assert BEGIN in page and END in page, f"docs/settings.md needs the markers {BEGIN} / {END}"
    shown = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == expected, "docs/settings.md's table differs from the declarations; " \
                              "paste this between its markers:\n" + expected


def test_run_help_has_a_flag_for_every_setting():
    rows = declared_rows()
    help_text = subprocess.run([sys.executable, "-m", "lazypatch", "run", "--help"],
                               capture_output=True, text=True, check=True, timeout=300).stdout
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", help_text))
    missing = [(variable, flag) for variable, _, flag, _, _ in rows
               if variable != "LAZYPATCH" and flag not in flags]
    assert not missing, missing
    # and the flags the issue found missing are there
    assert {"--track-calls", "--on-failure", "--on-skip", "--on-apply", "--cache-dir"} <= flags
