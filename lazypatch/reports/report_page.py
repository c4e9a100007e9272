"""One self-contained HTML page of a merged report: the patch-by-process matrix and details.

The page must open anywhere a report file can be copied to (a login node, a
laptop, an air-gapped cluster): no network, so its style and script are
inline and it links to nothing outside itself. Columns are the groups of
identical processes (``merging.merge``), so 10,000 ranks that agree make one
column, and the page's size follows the number of distinct behaviours, not
the number of processes.

Loaded only by ``lazypatch report --html``, never at activation.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any, Dict, List

from .merging import failures, group_name, short_label
from .reporting import cannot_apply_here, change_diff, plural, short_site

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; max-width: 100%; }
th, td { border: 1px solid #c8c8cc; padding: 0.25em 0.6em; text-align: left;
         overflow-wrap: anywhere; }
/* Long dotted patch names must wrap, not push the reason behind a scrollbar: the
   tables of single rows per failure or per redirected API take the page's width. */
#failures, #usage { width: 100%; table-layout: fixed; }
#failures th:nth-child(1) { width: 24%; } #failures th:nth-child(2) { width: 16%; }
#failures th:nth-child(3) { width: 14%; }
#usage th:nth-child(3) { width: 7%; } #usage th:nth-child(4) { width: 18%; }
th { background: #f0f0f3; }
td.status { font-weight: 600; text-align: center; }
.applied { background: #dff3e2; } .failed { background: #f9d6d5; }
.reverted { background: #e4ecfa; } .skipped { background: #f4f0dc; }
.pending { background: #f1f1f1; } .disabled { background: #ececec; color: #666; }
.absent { background: #fde9cf; }
tr.differs > td:first-child { border-left: 0.4em solid #d1242f; }
tr.differs { outline: 2px solid #d1242f; }
.cannot { background: #f7f7f7; color: #777; }
body.only-differences tr.same { display: none; }
body.hide-cannot tr.cannot-everywhere { display: none; }
#failures td { vertical-align: top; }
pre { background: #f6f8fa; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
details { margin: 0.4em 0; } summary { cursor: pointer; }
.note { color: #555; }
"""

# Inline, no library: one checkbox (or the address ending in #differences) hides
# the rows that are the same everywhere; the count line is written by the
# script so that a reader (and the browser test) can see the script ran.
SCRIPT = """
(function () {
  function toggle(id, bodyClass, checkedMeans) {
    var box = document.getElementById(id);
    if (!box) { return null; }
    function apply() {
      document.body.classList.toggle(bodyClass, checkedMeans ? box.checked : !box.checked);
    }
    box.addEventListener("change", apply);
    return {box: box, apply: apply};
  }
  var differences = toggle("only-differences", "only-differences", true);
  var cannot = toggle("show-cannot", "hide-cannot", false);
  if (window.location.hash === "#differences") { differences.box.checked = true; }
  if (window.location.hash === "#all") { differences.box.checked = false; cannot.box.checked = true; }
  differences.apply();
  cannot.apply();
  var rows = document.querySelectorAll("#matrix tr.differs, #matrix tr.same");
  var differing = document.querySelectorAll("#matrix tr.differs").length;
  document.getElementById("counted").textContent =
    differing + " of " + rows.length + " patches differ between processes";
  // Whether the page fits its window without a horizontal scrollbar: for a reader who
  // wonders, and for the browser test that opens it at 1280 px.
  var root = document.documentElement;
  document.body.setAttribute("data-fits-width", root.scrollWidth <= root.clientWidth ? "yes" : "no");
})();
"""


def _anchor(name: str) -> str:
    return "patch-" + "".join(character if character.isalnum() else "-" for character in name)


# Object addresses ("<RestoredAliases object at 0x7fd0...>") differ in every process
# and say nothing to a reader: the page shows the type.
ADDRESS = re.compile(r"( object)? at 0x[0-9a-fA-F]+")


def _status_word(cell: Dict[str, Any]) -> str:
    """The text report's words: a patch whose requirement is unmet "cannot apply"."""
    return "cannot apply" if cannot_apply_here(cell) else str(cell.get("status", ""))


def _cell(cell: Dict[str, Any]) -> str:
    status = str(cell.get("status", ""))
    word = _status_word(cell)
    version = cell.get("version")
    reasons = "; ".join(cell.get("reasons") or ())
    text = escape(word)
    if status == "failed" and reasons:
        # The reason in the cell itself: the reader should not have to hover or scroll.
        text += f"<br><small>{escape(reasons)}</small>"
    if version:
        text += f"<br><small>{escape(str(version))}</small>"
    css = "cannot" if word == "cannot apply" else escape(status)
    return f'<td class="status {css}" title="{escape(reasons, quote=True)}">{text}</td>'


def _failures_section(merged: Dict[str, Any]) -> List[str]:
    """What went wrong, first: each failed patch, where, why, its traceback a click away."""
    found = failures(merged)
    if not found:
        return []
    parts = ["<h2>What went wrong</h2>",
             '<table id="failures"><tr><th>patch</th><th>target</th><th>processes</th>'
             "<th>reason</th></tr>"]
    for patch, group, cell in found:
        reasons = "; ".join(cell.get("reasons") or ()) or "no reason recorded"
        traceback = (f"<details><summary>traceback</summary><pre>{escape(str(cell['error']))}"
                     f"</pre></details>" if cell.get("error") else "")
        parts.append(f'<tr class="failed-row"><td><a href="#{_anchor(patch["name"])}">'
                     f'{escape(patch["name"])}</a></td><td>{escape(patch["target"])}</td>'
                     f'<td>{escape(group["label"])}</td><td>{escape(reasons)}{traceback}</td></tr>')
    parts.append("</table>")
    return parts


def _usage_section(merged: Dict[str, Any]) -> List[str]:
    """What ran where: each API redirected to another device and each stand-in that
    provided something, with its calls and the first line of the user's code."""
    rows = merged.get("usage") or ()
    if not rows:
        return []
    summed = (f" (calls summed over {plural(merged['processes'], 'process', 'processes')})"
              if merged["processes"] > 1 else "")
    parts = [f"<h2>What ran where{summed}</h2>",
             '<table id="usage"><tr><th>what</th><th>ran on / as</th><th>calls</th>'
             "<th>first call</th><th>by</th></tr>"]
    for row in rows:
        calls = row.get("calls")
        site = str(row.get("first_call_site") or "")
        parts.append(f"<tr><td>{escape(str(row.get('what', '')))}</td>"
                     f"<td>{escape(str(row.get('where', '')))}</td>"
                     f"<td>{'-' if calls is None else calls}</td>"
                     f'<td title="{escape(site, quote=True)}">{escape(short_site(site) or "-")}'
                     f"</td><td>{escape(str(row.get('patch', '')))}</td></tr>")
    parts.append("</table>")
    return parts


def _changes(changes: Any) -> str:
    """A patch's changes as a list, addresses taken out; many changes folded."""
    items = [f"<li>{escape(str(change.get('action')))} "
             f"{escape(ADDRESS.sub('', str(change.get('target'))))}"
             f".{escape(str(change.get('key')))}</li>" for change in changes]
    listing = "<ul>" + "".join(items) + "</ul>"
    if len(items) > 8:
        return f"<details><summary>{len(items)} changes</summary>{listing}</details>"
    return listing


def _groups_section(groups: List[Dict[str, Any]]) -> List[str]:
    parts = ["<h2>Groups of identical processes</h2>", "<table id=\"groups\">",
             "<tr><th>group</th><th>processes</th><th>count</th><th>report files</th></tr>"]
    for index, group in enumerate(groups):
        paths = [str(member.get("path", "")) for member in group["members"]]
        shown = ", ".join(escape(path) for path in paths[:3]) + \
            (f", ... ({len(paths) - 3} more)" if len(paths) > 3 else "")
        parts.append(f"<tr><td>{group_name(index)}</td><td>{escape(group['label'])}: identical"
                     f"</td><td>{len(group['members'])}</td><td>{shown}</td></tr>")
    parts.append("</table>")
    return parts


def _matrix(merged: Dict[str, Any]) -> List[str]:
    groups = merged["groups"]
    # Many processes: the differences are the news, so the page opens on them.
    only = " checked" if merged["processes"] > 1 else ""
    parts = ["<h2>Patches by process</h2>",
             f'<label><input type="checkbox" id="only-differences"{only}> only the patches '
             'that differ between processes</label> '
             '<label><input type="checkbox" id="show-cannot"> also the patches that cannot '
             'apply on these hosts</label> <span id="counted" class="note"></span>',
             '<table id="matrix"><tr><th>patch</th><th>target</th>' +
             "".join(f"<th>{group_name(index)}<br><small>{escape(short_label(group['label']))}"
                     f"</small></th>"
                     for index, group in enumerate(groups)) + "</tr>"]
    for patch in merged["patches"]:
        row_class = "differs" if patch["differs"] else "same"
        if all(cannot_apply_here(cell) for cell in patch["cells"] if cell["status"] != "absent"):
            row_class += " cannot-everywhere"
        parts.append(f'<tr class="{row_class}"><td><a href="#{_anchor(patch["name"])}">'
                     f'{escape(patch["name"])}</a></td><td>{escape(patch["target"])}</td>'
                     + "".join(_cell(cell) for cell in patch["cells"]) + "</tr>")
    parts.append("</table>")
    return parts


def _details(merged: Dict[str, Any], diff: bool) -> List[str]:
    parts = ["<h2>Details</h2>"]
    for patch in merged["patches"]:
        first = next((cell for cell in patch["cells"] if cell.get("status") != "absent"),
                     patch["cells"][0])
        mark = " (differs between processes)" if patch["differs"] else ""
        parts.append(f'<details id="{_anchor(patch["name"])}"{" open" if patch["differs"] else ""}>'
                     f"<summary><b>{escape(patch['name'])}</b> on "
                     f"{escape(patch['target'])}{mark}</summary><ul>")
        package, version = first.get("package"), first.get("version")
        if package:
            parts.append(f"<li>package: {escape(str(package))} "
                         f"{escape(str(version or '(no installed distribution)'))}</li>")
        for label, key in (("description", "description"), ("source", "source"),
                           ("phase", "phase")):
            if first.get(key):
                parts.append(f"<li>{label}: {escape(str(first[key]))}</li>")
        shown_changes: List[str] = []
        for index, (group, cell) in enumerate(zip(merged["groups"], patch["cells"])):
            reasons = "; ".join(cell.get("reasons") or ())
            parts.append(f"<li>{group_name(index)} ({escape(group['label'])}): "
                         f'<span class="{escape(str(cell.get("status")))}">'
                         f"{escape(_status_word(cell))}</span>"
                         + (f" <span class=\"note\">{escape(reasons)}</span>" if reasons else ""))
            changes = _changes(cell.get("changes") or ()) if cell.get("changes") else ""
            # The same changes in every group are listed once, not once per group.
            if changes and changes not in shown_changes:
                shown_changes.append(changes)
                parts.append(changes)
            if cell.get("error"):
                parts.append(f"<details><summary>traceback</summary>"
                             f"<pre>{escape(str(cell['error']))}</pre></details>")
            parts.append("</li>")
        if diff:
            for change in first.get("changes") or ():
                if "original_code" in change:
                    parts.append(f"<p>source diff of {escape(str(change.get('target')))}."
                                 f"{escape(str(change.get('key')))}:</p>"
                                 f'<pre class="diff">{escape(change_diff(first, change))}</pre>')
        parts.append("</ul></details>")
    return parts


def render_page(merged: Dict[str, Any], diff: bool = False) -> str:
    """The merged report (``merging.merge``) as one HTML document with inline style
    and script and no outside reference; ``diff`` adds each replaced function's
    source diff to its patch's details."""
    differing = sum(1 for patch in merged["patches"] if patch["differs"])
    failed = len({patch["name"] for patch, _, _ in failures(merged)})
    if merged["processes"] == 1:
        document = merged["groups"][0]["members"][0]
        title = (f"lazypatch report: 1 process (pid {document.get('pid', '?')}), "
                 + (f"{plural(failed, 'patch', 'patches')} failed" if failed else "no failure"))
    else:
        title = (f"lazypatch report: {plural(merged['processes'], 'process', 'processes')}, "
                 f"{plural(len(merged['groups']), 'group')}, "
                 + (f"{plural(failed, 'patch', 'patches')} failed, " if failed else "")
                 + f"{plural(differing, 'patch', 'patches')} "
                 f"differ{'s' if differing == 1 else ''}")
    body = ' class="hide-cannot' + (' only-differences"' if merged["processes"] > 1 else '"')
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{STYLE}</style></head><body{body}>",
             f"<h1>{escape(title)}</h1>"]
    if merged["processes"] > 1:
        parts.append('<p class="note">Each column is a group of processes in which every '
                     "patch has the same status; rows outlined in red differ between groups.</p>")
    else:
        # The one process's report file and labels, which a groups table would have shown.
        document = merged["groups"][0]["members"][0]
        parts.append(f'<p class="note">{escape(str(document.get("path", "")))}: '
                     f'{escape(merged["groups"][0]["label"])}</p>')
    parts += _failures_section(merged)
    parts += _usage_section(merged)
    if merged["processes"] > 1:
        # One process is one group: a table of groups would say nothing.
        parts += _groups_section(merged["groups"])
    parts += _matrix(merged)
    parts += _details(merged, diff)
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    page = "\n".join(parts) + "\n"
    # File names, argv and reasons read from reports may carry undecodable bytes (a report
    # file whose name is not UTF-8 arrives as lone surrogates): shown as U+FFFD, the page
    # itself is always valid UTF-8.
    return page.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
