"""``lazypatch doctor``: check how lazypatch activates here and say what to fix.

The checks run in a fresh interpreter started like the user's program (same
``sys.executable``, same environment, so ``.pth`` and ``lazypatch run``
activation take part), never in the CLI's own process, whose state says
nothing about the program's. The probe activates lazypatch, optionally
imports modules the user names, and reports what it sees as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Sequence

ACTIVATION_BUDGET_MS = 10.0

# Runs in the probe interpreter; prints one JSON document.
PROBE = r"""
import json, sys, warnings
imports = json.loads(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import lazypatch
    from lazypatch.activate.activation import activate
    before = lazypatch.activation_info()["activated_by"]
    active = activate("lazypatch doctor")
    from lazypatch.decide.selection import unmet_requirements
    from lazypatch.activate import site_install
    from lazypatch.state import STATE
    position_after_activation = sys.meta_path.index(STATE.finder) \
        if STATE.finder in sys.meta_path else -1
    import_errors = {}
    for name in imports:
        try:
            __import__(name)
        except Exception as error:
            import_errors[name] = f"{type(error).__name__}: {error}"
unmet = []
for patch in STATE.catalog.patches():
    for requirement, reason in unmet_requirements(patch):
        unmet.append({"name": patch.name, "requirement": requirement, "reason": reason,
                      "enabled": patch.enabled})
info = lazypatch.activation_info()
standard = ("BuiltinImporter", "FrozenImporter", "PathFinder")
def describe(hook):
    return getattr(hook, "__qualname__", None) or type(hook).__qualname__
print(json.dumps({
    "python": sys.executable, "prefix": sys.prefix,
    "activated_by": before or info["activated_by"], "active": active,
    "activation_ms": info["milliseconds"],
    "meta_path": [f"{getattr(hook, '__module__', '?')}.{describe(hook)}" for hook in sys.meta_path],
    "finder_position": sys.meta_path.index(STATE.finder) if STATE.finder in sys.meta_path else -1,
    "finder_position_after_activation": position_after_activation,
    "other_hooks": [f"{getattr(hook, '__module__', '?')}.{describe(hook)}" for hook in sys.meta_path
                    if hook is not STATE.finder and describe(hook) not in standard],
    "path_hooks": [f"{getattr(hook, '__module__', '?')}.{describe(hook)}" for hook in sys.path_hooks],
    "imported_before": info["imported_before"],
    "patches": len(STATE.catalog.by_name),
    "site_files": dict(site_install.status(), paths=site_install.files()),
    "plugins": {name: entry.value for name, entry in STATE.plugin_entries.items()},
    "report": lazypatch.report(),
    "unmet": unmet,
    "import_errors": import_errors,
    "warnings": [f"{item.category.__name__}: {item.message}" for item in caught
                 if "lazypatch" in str(item.message)],
}, default=str))
"""


def probe(imports: Sequence[str] = ()) -> Dict[str, Any]:
    """Run the probe in a fresh interpreter of this environment; its findings."""
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(imports))],
                            capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"the doctor's probe interpreter failed (exit {result.returncode}):\n"
                           f"{result.stderr.strip()}")
    return json.loads(lines[-1])


def measure_activation(runs: int) -> Dict[str, Any]:
    """CPU time of ``python -c pass`` (LAZYPATCH=0) and of ``import lazypatch.auto``,
    and the modules activation adds, as figures that a busy machine does not inflate.

    Wall time on a shared machine measures the machine: one start can take 140 ms
    where the same start takes 25 ms a second later. So the cost is the child's CPU
    time (user + system, from the kernel's accounting of the reaped child), which
    waiting for a core does not change; both starts are made once, uncounted, first
    (a fresh install compiles its bytecode and writes its plugin cache on its first
    start); starts alternate, and the cost is the difference of the smallest of each.
    ``stable`` is False when no verdict can be drawn: the smallest samples spread by
    more than the budget itself, or the machine was busier than its cores (CPU time
    is stable against waiting, not against the cache and frequency contention of a
    saturated machine: there the same start costs twice its idle CPU time).
    """
    bare_environment = dict(os.environ, LAZYPATCH="0")
    active_environment = {key: value for key, value in os.environ.items() if key != "LAZYPATCH"}
    count_modules = "import sys; print(len(sys.modules))"
    # Warm-up, uncounted; it also counts the modules each start ends with.
    _, bare_modules = _child_cpu_ms(count_modules, bare_environment)
    _, active_modules = _child_cpu_ms("import lazypatch.auto; " + count_modules, active_environment)
    bare: List[float] = []
    active: List[float] = []
    for _ in range(runs):
        bare.append(_child_cpu_ms("pass", bare_environment)[0])
        active.append(_child_cpu_ms("import lazypatch.auto", active_environment)[0])
    bare.sort()
    active.sort()
    # The second-smallest sample when there are several: one start that the kernel's
    # tick accounting (its CPU times are counted in ticks) rounded down says nothing.
    low = 1 if runs >= 3 else 0
    spread = max(bare[low] - bare[0], active[low] - active[0])
    try:
        modules_added = int(active_modules) - int(bare_modules)
    except ValueError:
        modules_added = -1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    busy = load > (os.cpu_count() or 1)
    return {"bare_ms": bare[0], "active_ms": active[0], "load_average": load,
            "cost_ms": max(0.0, active[0] - bare[0]), "runs": runs, "clock": "cpu",
            "modules_added": modules_added, "stable": spread <= ACTIVATION_BUDGET_MS and not busy}


def _child_cpu_ms(command: str, environment: Dict[str, str]) -> "tuple[float, str]":
    """The CPU time (ms, user + system) of ``python -c command`` and what it printed."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-c", command], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds * 1000.0, result.stdout.strip()


def slowest_activation_imports(count: int = 3) -> List[str]:
    """The modules whose import takes longest during ``import lazypatch.auto``
    (``python -X importtime``, cumulative microseconds), as "name (N.N ms)"."""
    environment = {key: value for key, value in os.environ.items() if key != "LAZYPATCH"}
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "import lazypatch.auto"],
                            env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    timings = []
    after_site = False
    for line in result.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].strip()
        if name == "site" and parts[2] == " site":
            # Lines come in completion order: what finished before `site` (its .pth
            # files, an editable install's finder) is paid by a bare start too.
            after_site = True
            continue
        # lazypatch and lazypatch.auto contain everything else: the question is what inside.
        if after_site and name not in ("lazypatch", "lazypatch.auto"):
            timings.append((int(parts[1]), name))
    timings.sort(reverse=True)
    return [f"{name} ({microseconds / 1000:.1f} ms)" for microseconds, name in timings[:count]]


def diagnose(imports: Sequence[str] = (), runs: int = 7) -> Dict[str, Any]:
    """Everything ``lazypatch doctor`` prints: facts, ``problems`` and ``notes``
    (each a sentence that names the fix)."""
    findings = probe(imports)
    problems: List[str] = []
    notes: List[str] = []
    _activation_problems(findings, problems, notes)
    _patch_problems(findings, problems, notes)
    if runs:
        findings["timing"] = measure_activation(runs)
        _timing_findings(findings["timing"], problems, notes)
    findings["problems"] = problems
    findings["notes"] = notes
    return findings


def _activation_problems(findings: Dict[str, Any], problems: List[str], notes: List[str]) -> None:
    """Whether lazypatch is active, its finder first, and activated before its targets."""
    if not findings["active"]:
        problems.append("lazypatch is not active in a fresh interpreter here (LAZYPATCH=0 is "
                        "set?); unset LAZYPATCH to activate it")
    position = findings["finder_position"]
    if position != 0:
        ahead = findings["meta_path"][:position] if position > 0 else findings["meta_path"]
        problems.append(f"lazypatch's finder is at position {position} of sys.meta_path, "
                        f"behind {', '.join(ahead)}; imports those hooks claim are never "
                        f"patched. Activate lazypatch after installing them, or call "
                        f"lazypatch.install() again to move its finder first")
    if findings["other_hooks"]:
        notes.append(f"other import hooks on sys.meta_path: {', '.join(findings['other_hooks'])} "
                     f"(fine while lazypatch's finder stays first)")
    _site_file_problems(findings.get("site_files") or {}, problems, notes)
    if findings["imported_before"]:
        problems.append(f"targets imported before activation: "
                        f"{', '.join(findings['imported_before'])}; their patches applied late "
                        f"and earlier `from x import y` copies may hold originals. Activate "
                        f"earlier: `lazypatch run`, `lazypatch site install`, or "
                        f"`import lazypatch.auto` as the first line")


def _site_file_problems(site: Dict[str, Any], problems: List[str], notes: List[str]) -> None:
    """The activation files of `lazypatch site install` (``site_install.status``): one whose
    content this lazypatch would not write, or a ``.pth`` without its ``.start``."""
    for kind in ("pth", "start"):
        if site.get(kind) == "outdated":
            problems.append(f"the site activation file {site['paths'][kind]} is not the one this "
                            f"lazypatch writes (left by another version?); run `lazypatch site "
                            f"install` to rewrite it, or `lazypatch site uninstall` to remove it")
    if site.get("pth") != "absent" and site.get("start") == "absent":
        notes.append(f"{site['paths']['pth']} has no .start file beside it: Python 3.15 and "
                     f"later deprecate its import line and read the .start file instead; run "
                     f"`lazypatch site install` to write both")
    if site.get("pth") == "absent" and site.get("start") not in (None, "absent") \
            and sys.version_info < (3, 15):
        problems.append(f"{site['paths']['start']} has no .pth file beside it, and Python "
                        f"before 3.15 reads only the .pth: interpreters here start without "
                        f"lazypatch; run `lazypatch site install` to write both")


def _patch_problems(findings: Dict[str, Any], problems: List[str], notes: List[str]) -> None:
    """Conflicts, failed patches, unmet requirements, untracked calls, warnings and
    the modules ``--import`` could not import."""
    for record in findings["report"]:
        for conflict in record.get("conflicts") or ():
            message = f"conflict: {conflict}; disable one with LAZYPATCH_DISABLE=<name>"
            if message not in problems:
                problems.append(message)
        if record.get("status") == "failed":
            problems.append(f"patch {record['name']} failed: {record.get('reason')}; fix the "
                            f"pack or disable it with LAZYPATCH_DISABLE={record['name']}")
    notes += unmet_notes(findings["unmet"])
    for reason in sorted({str(record.get("calls_not_tracked")) for record in findings["report"]
                          if record.get("status") == "applied"
                          and record.get("calls_not_tracked")}):
        notes.append(reason)   # the report cannot say which patches are never called
    for warning in findings["warnings"]:
        problems.append(warning)
    for name, error in findings["import_errors"].items():
        problems.append(f"--import {name} failed: {error}")


def _timing_findings(timing: Dict[str, Any], problems: List[str], notes: List[str]) -> None:
    """Activation over its budget (on a machine quiet enough to say), or why not judged."""
    if timing["cost_ms"] > ACTIVATION_BUDGET_MS and timing["stable"]:
        slowest = ", ".join(slowest_activation_imports()) or "nothing measurable"
        problems.append(
            f"activation costs {timing['cost_ms']:.1f} ms of CPU per interpreter start (the "
            f"least of {timing['runs']}), over the {ACTIVATION_BUDGET_MS:.0f} ms budget; slowest "
            f"imports: {slowest}. Plugin packs (LAZYPATCH_PLUGINS=0 leaves them out) and "
            f"LAZYPATCH_MODULES run here")
    elif not timing["stable"]:
        notes.append(
            f"activation cost not judged: the machine is busy (load average "
            f"{timing['load_average']:.1f} on {os.cpu_count()} cores) or the CPU time of "
            f"{timing['runs']} starts varied by more than the {ACTIVATION_BUDGET_MS:.0f} ms "
            f"budget; run `lazypatch doctor` again on a quiet machine")


def unmet_notes(unmet: Sequence[Dict[str, Any]]) -> List[str]:
    """One note per pack for its patches whose requirements do not hold here (an
    Ascend pack on a CPU host is one line, not one per patch and requirement)."""
    by_pack: Dict[str, Dict[str, Any]] = {}
    for item in unmet:
        pack = item["name"].split(".", 1)[0]
        group = by_pack.setdefault(pack, {"names": [], "disabled": set(), "reasons": []})
        if item["name"] not in group["names"]:
            group["names"].append(item["name"])
        if not item.get("enabled", True):
            group["disabled"].add(item["name"])
        if item["reason"] not in group["reasons"]:
            group["reasons"].append(item["reason"])
    notes = []
    for pack, group in by_pack.items():
        names, reasons = group["names"], "; ".join(group["reasons"])
        if len(names) == 1:
            notes.append(f"patch {names[0]} will be skipped: {reasons}")
            continue
        off = len(group["disabled"])
        state = ("all disabled anyway" if off == len(names) else
                 f"{off} of them disabled anyway" if off else "they will be skipped")
        notes.append(f"{len(names)} {pack}.* patches cannot apply on this host ({state}): "
                     f"{reasons}")
    return notes


def render(findings: Dict[str, Any]) -> str:
    """The findings as text: facts, then problems (each with its fix), then notes."""
    lines = [
        f"python:            {findings['python']}",
        f"activated by:      {findings['activated_by'] or 'not active'}",
        f"patches:           {findings['patches']} registered "
        f"({len(findings['plugins'])} from plugin packs)",
        f"finder position:   {findings['finder_position']} on sys.meta_path",
        f"site files:        {_site_files_line(findings.get('site_files') or {})}",
        f"activation (in-process): {findings['activation_ms']:.2f} ms",
    ]
    timing = findings.get("timing")
    if timing:
        verdict = ("not judged against" if not timing["stable"] else
                   "within" if timing["cost_ms"] <= ACTIVATION_BUDGET_MS else "OVER")
        lines.append(f"activation cost:   {timing['cost_ms']:.1f} ms of CPU, {verdict} the "
                     f"{ACTIVATION_BUDGET_MS:.0f} ms budget (least of {timing['runs']} "
                     f"starts: {timing['active_ms']:.1f} ms with lazypatch, "
                     f"{timing['bare_ms']:.1f} ms bare; {timing['modules_added']} modules "
                     f"added to a bare start)")
    lines.append("")
    if findings["problems"]:
        lines.append(f"{len(findings['problems'])} problem(s):")
        lines += [f"  - {problem}" for problem in findings["problems"]]
    else:
        lines.append("no problems found")
    if findings["notes"]:
        lines.append("notes:")
        lines += [f"  - {note}" for note in findings["notes"]]
    return "\n".join(lines)


def _site_files_line(site: Dict[str, Any]) -> str:
    """The state of `lazypatch site install`'s two files, as one line."""
    if not site:
        return "unknown"
    return f".pth {site.get('pth')}, .start {site.get('start')} (in {site.get('directory')})"
