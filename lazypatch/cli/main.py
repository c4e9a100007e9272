"""The ``lazypatch`` command (also ``python -m lazypatch``).

Subcommands: ``run`` (activate in a command and all its Python children),
``list`` (registered patches, importing no target), ``report`` (render
report files of one or many processes), ``site`` (activation at every
interpreter start of this environment) and ``doctor`` (what to fix).

Exit codes: 0 success, 1 a problem found (``doctor``) or a failed action,
2 a usage error (argparse's convention), 126/127 for ``run`` when the
command cannot be executed or found (the shell's convention).

This module is the command line only: it calls the engine, the activation
routine, ``report``, ``plugins`` and ``site_install``, and duplicates none of them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..activate.configuration import LOG_LEVELS, PORTABLE_VARIABLE
from ..integrations.ray import install_runtime_env_hook
from ..state import STATUSES

USAGE_ERROR = 2
PROBLEMS_FOUND = 1

# `lazypatch run` option -> (environment variable, how the value is written).
RUN_OPTIONS = {
    "enable": "LAZYPATCH_ENABLE",
    "disable": "LAZYPATCH_DISABLE",
    "modules": "LAZYPATCH_MODULES",
    "report": "LAZYPATCH_REPORT",
    "log": "LAZYPATCH_LOG",
    "config": "LAZYPATCH_CONFIG",
}


def _parser(pack_options: bool = False) -> argparse.ArgumentParser:
    """The command line; ``pack_options`` adds the packs' flags to ``run`` (which
    imports the built-in packs, so only when ``run`` is the command)."""
    from .. import __version__
    parser = argparse.ArgumentParser(
        prog="lazypatch",
        description="Monkey patches applied the moment their target module is imported.",
        epilog="Configuration: LAZYPATCH_* environment variables, a LAZYPATCH_CONFIG TOML file "
               "or [tool.lazypatch] in ./pyproject.toml (see `lazypatch run --help`); "
               "LAZYPATCH=0 turns every activation off for one process.")
    parser.add_argument("--version", action="version", version=f"lazypatch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_run_command(commands, pack_options)
    _add_list_command(commands)
    _add_report_command(commands)
    _add_site_command(commands)
    _add_doctor_command(commands)
    return parser


def _add_run_command(commands: Any, pack_options: bool) -> None:
    """`lazypatch run`: its settings as flags (and the packs' own when ``pack_options``)."""
    run = commands.add_parser(
        "run", help="run a command with lazypatch active in it and in every Python child",
        description="Prepend lazypatch's bootstrap directory to PYTHONPATH and execute\n"
                    "COMMAND. Every Python process started from it with the same interpreter\n"
                    "(subprocesses, multiprocessing spawn workers, torchrun ranks) activates\n"
                    "lazypatch at start-up; your own sitecustomize still runs after\n"
                    "lazypatch's. Options set the LAZYPATCH_* variables; relative paths are\n"
                    "made absolute first.",
        usage="lazypatch run [OPTIONS] -- COMMAND [ARGS ...]",
        epilog="Every setting is an environment variable, a TOML key (the name without\n"
               "LAZYPATCH_, in lower case: brake_step = 100) and a flag above, all from one\n"
               "declaration. The environment wins over the LAZYPATCH_CONFIG file, which\n"
               "wins over [tool.lazypatch] in ./pyproject.toml. LAZYPATCH=0 turns\n"
               "activation off.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--enable", action="append", metavar="SELECTOR",
                     help="turn on patches by name, glob or tag (LAZYPATCH_ENABLE); repeatable")
    run.add_argument("--disable", action="append", metavar="SELECTOR",
                     help="turn off patches by name, glob or tag (LAZYPATCH_DISABLE); repeatable")
    run.add_argument("--modules", action="append", metavar="MODULE",
                     help="extra patch module to import at activation (LAZYPATCH_MODULES); "
                          "repeatable")
    run.add_argument("--report", metavar="PATH",
                     help="write a JSON report at exit; {host}, {node}, {rank}, {local_rank}, "
                          "{worker} and {pid} are filled in; a path with neither {pid} nor "
                          "{rank} gets -{pid}, one file per process (LAZYPATCH_REPORT)")
    run.add_argument("--strict", action="store_true",
                     help="a failing patch fails its target's import (LAZYPATCH_STRICT=1)")
    run.add_argument("--log", metavar="LEVEL", type=str.upper,
                     choices=tuple(LOG_LEVELS),
                     help="level of the 'lazypatch' logger (LAZYPATCH_LOG)")
    run.add_argument("--log-all-ranks", action="store_true",
                     help="informational messages on every rank (LAZYPATCH_LOG_ALL_RANKS=1)")
    run.add_argument("--config", metavar="FILE",
                     help="TOML file with the same settings (LAZYPATCH_CONFIG)")
    run.add_argument("--no-plugins", action="store_true",
                     help="skip plugin packs of installed distributions (LAZYPATCH_PLUGINS=0)")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND",
                     help="the command to run, after --")
    if pack_options:
        _add_pack_options(run)


def _add_list_command(commands: Any) -> None:
    """`lazypatch list`: selectors, tags, statuses, JSON."""
    listing = commands.add_parser(
        "list", help="every registered patch, without importing any target",
        description="List the patches of the built-in packs, plugin packs and "
                    "LAZYPATCH_MODULES with target, tags, conditions and whether each is "
                    "enabled under the current configuration. Imports no target module.")
    listing.add_argument("patterns", nargs="*", metavar="SELECTOR",
                         help="only patches a name, glob (numpy_compat.*), pack or tag selects, "
                              "as LAZYPATCH_ENABLE would")
    listing.add_argument("--enabled", action="store_true",
                         help="only patches that are enabled and can apply on this host")
    listing.add_argument("--tag", action="append", default=[], metavar="TAG",
                         help="only patches with this tag; repeatable")
    listing.add_argument("--status", action="append", default=[], choices=STATUSES,
                         metavar="STATUS",
                         help="only patches with this status in this process (pending: "
                              "enabled, waiting for its target; disabled; skipped; applied "
                              "when the target is already imported here); repeatable")
    listing.add_argument("--all", action="store_true",
                         help="also the patches that cannot apply on this host (a required "
                              "distribution is missing) or are off by default, summarised "
                              "otherwise unless a selector, --tag or --status picks them")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_report_command(commands: Any) -> None:
    """`lazypatch report`: files to render or merge, the HTML page, diffs."""
    report = commands.add_parser(
        "report", help="render report files written by LAZYPATCH_REPORT",
        description="Render one report file as a table, or merge any number (one per rank "
                    "or process; files, glob patterns or directories) into one view: "
                    "identical processes grouped, only the patches that differ shown.")
    report.add_argument("files", nargs="+", metavar="FILE",
                        help="JSON report file(s), glob pattern(s) ('out/*.json') or "
                             "director(ies) holding them")
    report.add_argument("--format", choices=("table", "json"), default="table",
                        help="table (default) or json")
    report.add_argument("--all", action="store_true",
                        help="every patch; by default the ones that cannot apply on the "
                             "host (off by default, a requirement unmet) are summarised "
                             "in one line per pack, and with several reports only the "
                             "patches that differ are listed")
    report.add_argument("--html", metavar="PATH",
                        help="also write one self-contained HTML page (no network) with "
                             "the patch-by-process matrix and each patch's details")
    report.add_argument("--diff", action="store_true",
                        help="for each replaced function, the source diff original against "
                             "replacement (read from the source files named in the report)")
    report.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even when a patch failed in some process (by default "
                             "the exit status is 1 then, so that a job script can stop)")


def _add_site_command(commands: Any) -> None:
    """`lazypatch site install|uninstall|status`."""
    site = commands.add_parser(
        "site", help="activate lazypatch at every interpreter start of this environment",
        description="install writes lazypatch-activate.pth (and the Python 3.15+ "
                    "lazypatch-activate.start, PEP 829) into this environment's "
                    "site-packages; uninstall removes them; status shows them. "
                    "LAZYPATCH=0 turns the activation off for one process.")
    site.add_argument("action", choices=("install", "uninstall", "status"))
    site.add_argument("--dir", metavar="DIRECTORY",
                      help="a site directory other than this environment's site-packages")


def _add_doctor_command(commands: Any) -> None:
    """`lazypatch doctor`: modules to import in the probe, timing runs, JSON."""
    doctor = commands.add_parser(
        "doctor", help="check this environment and say what to fix",
        description="Start a fresh interpreter like your program would, activate "
                    "lazypatch, and check the finder's position on sys.meta_path, other "
                    "import hooks, targets imported before activation, conflicting and "
                    "failing patches, unmet requirements and configuration warnings; "
                    "measure the activation cost. Exit status 1 if something needs fixing.")
    doctor.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE",
                        help="also import MODULE in the probe, to see its patches apply "
                             "(conflicts and failures show only then); repeatable")
    doctor.add_argument("--runs", type=int, default=7, metavar="N",
                        help="interpreter starts per timing sample (default 7; 0 skips timing)")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")


def pack_variables() -> Dict[str, Dict[str, str]]:
    """Variables the packs declare, grouped by pack: {pack: {variable: meaning}}.

    Imports the built-in packs one at a time (they only declare patches; no
    target is imported) and the LAZYPATCH_MODULES, with warnings silenced:
    the command's own process reports nothing, its child does.
    """
    import warnings

    from ..state import STATE
    groups: Dict[str, Dict[str, str]] = {}

    def collect(pack: str, load: Any) -> None:
        before = set(STATE.declared_variables)
        try:
            load()
        except Exception:   # the child's activation names the broken pack
            return
        new = {name: meaning for name, meaning in STATE.declared_variables.items()
               if name not in before}
        if new:
            groups.setdefault(pack, {}).update(new)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from .. import registry
        for pack in registry.pack_names():
            collect(pack, lambda pack=pack: __import__(f"{registry.__name__}.{pack}"))
        from ..activate.configuration import read
        for module in read().modules:
            collect(module, lambda module=module: __import__(module))
    return groups


def option_of(variable: str) -> str:
    """The `lazypatch run` flag of a pack variable: LAZYPATCH_BRAKE_STEP -> --brake-step."""
    return "--" + variable[len("LAZYPATCH_"):].lower().replace("_", "-")


# The settings `lazypatch run` has a flag of its own for (a list, a switch, a choice);
# every other setting gets its flag generated from its declaration (option_of).
HAND_WRITTEN_FLAGS = {
    "LAZYPATCH": "",                       # LAZYPATCH=0 turns activation off: no flag
    "LAZYPATCH_ENABLE": "--enable", "LAZYPATCH_DISABLE": "--disable",
    "LAZYPATCH_MODULES": "--modules", "LAZYPATCH_REPORT": "--report",
    "LAZYPATCH_STRICT": "--strict", "LAZYPATCH_LOG": "--log",
    "LAZYPATCH_LOG_ALL_RANKS": "--log-all-ranks", "LAZYPATCH_CONFIG": "--config",
    "LAZYPATCH_PLUGINS": "--no-plugins",
}


def engine_variables() -> Dict[str, str]:
    """The engine's own settings (not a pack's): {variable: meaning}."""
    from ..activate.configuration import VARIABLES
    from ..state import STATE
    known = dict(VARIABLES)
    # declared by lazypatch/__init__ (events.py is loaded only when one is set)
    known.update((name, meaning) for name, meaning in STATE.declared_variables.items()
                 if name.startswith("LAZYPATCH_ON_"))
    return known


def settings_rows() -> List[Tuple[str, str, str, str, str]]:
    """Every setting a user may set, as (variable, TOML key, `run` flag, meaning, owner):
    the one declaration behind the environment, the files and the flags."""
    rows = []
    groups = [("engine", engine_variables())] + [
        (f"{pack} pack", variables) for pack, variables in pack_variables().items()]
    for owner, variables in groups:
        for variable, meaning in variables.items():
            key = "" if variable in ("LAZYPATCH", "LAZYPATCH_CONFIG") \
                else variable[len("LAZYPATCH_"):].lower()
            flag = HAND_WRITTEN_FLAGS.get(variable, option_of(variable))
            rows.append((variable, key, flag, meaning, owner))
    return rows


def _add_pack_options(run: argparse.ArgumentParser) -> None:
    """One `lazypatch run` flag per setting without a hand-written one, grouped by
    owner (the engine, then each pack) in --help."""
    taken = {option for action in run._actions for option in action.option_strings}
    engine = run.add_argument_group("other settings (each flag sets its variable)")
    for variable, meaning in engine_variables().items():
        if variable in HAND_WRITTEN_FLAGS:
            continue
        option = option_of(variable)
        taken.add(option)
        engine.add_argument(option, dest=f"pack:{variable}", metavar="VALUE",
                            help=f"{meaning} ({variable})".replace("%", "%%"))
    for pack, variables in pack_variables().items():
        group = run.add_argument_group(f"{pack} pack (each flag sets its variable)")
        for variable, meaning in variables.items():
            option = option_of(variable)
            if option in taken:
                continue
            taken.add(option)
            text = meaning[len(f"{pack} pack: "):] if meaning.startswith(f"{pack} pack: ") \
                else meaning
            group.add_argument(option, dest=f"pack:{variable}", metavar="VALUE",
                               help=f"{text} ({variable})".replace("%", "%%"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; return the exit status."""
    arguments_given = list(sys.argv[1:] if argv is None else argv)
    misplaced = misplaced_options(arguments_given)
    if misplaced:
        print(f"lazypatch: {misplaced}", file=sys.stderr)
        return USAGE_ERROR
    parser = _parser(pack_options=bool(arguments_given) and arguments_given[0] == "run")
    arguments = parser.parse_args(arguments_given)
    if arguments.command is None:   # a bare `lazypatch`: say what it can do
        parser.print_help()
        return 0
    handler = {"run": _run, "list": _list, "report": _report, "site": _site,
               "doctor": _doctor}[arguments.command]
    _tolerant_output()
    try:
        return handler(arguments, parser)
    except BrokenPipeError:
        # Output piped into a reader that stopped early (`lazypatch list | head`):
        # not a failure. Point stdout at /dev/null so the exit flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


COMMANDS = ("run", "list", "report", "site", "doctor")


def misplaced_options(arguments: Sequence[str]) -> str:
    """A message with the corrected command line when options come before the command
    (`lazypatch --enable device run ...`), else "". argparse alone answers that with
    "invalid choice: 'device'", which names neither the mistake nor the fix."""
    if not arguments or not arguments[0].startswith("-") or arguments[0] in (
            "-h", "--help", "--version"):
        return ""
    for index, word in enumerate(arguments):
        if word == "--":
            break
        if word in COMMANDS:
            import shlex
            corrected = [word, *arguments[:index], *arguments[index + 1:]]
            return (f"options go after the command: {arguments[0]} comes before {word!r}; "
                    f"write: lazypatch {shlex.join(corrected)}")
    return ""


def _tolerant_output() -> None:
    """Make stdout write a character its encoding lacks (a patch named in Chinese, a
    report with `é`, printed to an ASCII terminal or a C-locale pipe) as a backslash
    escape, as Python's stderr does, instead of dying with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "") == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):   # a stream that cannot change now: leave it
                pass


# --- run ------------------------------------------------------------------

def run_environment(arguments: argparse.Namespace,
                    environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment ``lazypatch run`` executes its command with."""
    from ..activate.bootstrap import BOOTSTRAP_DIRECTORY
    environment = dict(os.environ if environ is None else environ)
    for option, variable in RUN_OPTIONS.items():
        value = getattr(arguments, option)
        if value:
            environment[variable] = ",".join(value) if isinstance(value, list) else value
    for destination, value in vars(arguments).items():
        if destination.startswith("pack:") and value is not None:
            environment[destination[len("pack:"):]] = value
    # The child may change directory before it reads them (or write its report
    # at exit, long after an os.chdir): relative paths travel as absolute ones.
    from ..activate.configuration import path_variables
    for variable in path_variables():
        value = environment.get(variable, "").strip()
        if value:
            environment[variable] = os.path.abspath(value)
    if arguments.strict:
        environment["LAZYPATCH_STRICT"] = "1"
    if arguments.log_all_ranks:
        environment["LAZYPATCH_LOG_ALL_RANKS"] = "1"
    if arguments.no_plugins:
        environment["LAZYPATCH_PLUGINS"] = "0"
    # Prepend without ever adding an empty entry: an empty PYTHONPATH item
    # means the current directory.
    existing = [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep)
                if entry != BOOTSTRAP_DIRECTORY]
    existing_text = os.pathsep.join(existing)
    environment["PYTHONPATH"] = BOOTSTRAP_DIRECTORY + (os.pathsep + existing_text
                                                       if existing_text else "")
    # The bootstrap compares this with its own interpreter and stays inert
    # under another Python or environment.
    environment["LAZYPATCH_RUN_PYTHON"] = f"{sys.prefix}|{sys.implementation.cache_tag}"
    # The same settings once more in one PYTHON* variable: the one form that
    # multi-node launchers (DeepSpeed's runner, mpirun -x PYTHON*) carry to other nodes.
    # The files' settings travel inside PYTHONLAZYPATCH as values only: where each came
    # from travels beside it, so that the program's messages name the file and key.
    # One read gives both (before PYTHONLAZYPATCH is set: with it, files are not read).
    from ..activate.configuration import encode_settings, quiet_read, settings_from_files
    configuration = quiet_read(environment)
    sources = settings_from_files(configuration, environment)
    if sources:
        environment["LAZYPATCH_SETTINGS_FROM"] = sources
    environment[PORTABLE_VARIABLE] = encode_settings(configuration.settings)
    # Ray workers inherit nothing from the driver: each ray.init adds the activation
    # to its runtime env through Ray's hook (lazypatch.integrations.ray).
    install_runtime_env_hook(environment)
    return environment


def _run(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = list(arguments.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        _usage_error("run", "no command given; write it after --, for example: "
                            "lazypatch run --enable device -- python train.py")
        return USAGE_ERROR
    if arguments.config:
        problem = config_file_problem(arguments.config)
        if problem:
            _usage_error("run", f"--config {arguments.config}: {problem}")
            return USAGE_ERROR
    from ..reports.reporting import one_file_per_process
    report = arguments.report or ""
    if report and one_file_per_process(report) != report:
        arguments.report = one_file_per_process(report)
        print(f"note: lazypatch run: --report {report} names no process; every Python "
              f"process of the command writes one, so writing {arguments.report} "
              f"({{pid}} filled in)", file=sys.stderr)
    environment = run_environment(arguments)
    problem = (other_interpreter_problem(command[0], environment)
               or interpreter_option_problem(command, environment))
    if problem:
        print(f"lazypatch run: {problem}", file=sys.stderr)
        return USAGE_ERROR
    misplaced = options_after_the_command(command, parser)
    if misplaced:
        print(f"note: lazypatch run: {misplaced}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, environment)
    except FileNotFoundError:
        hint = "check the name and PATH"
        if command[0].endswith(".py"):
            import shlex
            hint = (f"a Python script is run by its interpreter: lazypatch run -- python "
                    f"{shlex.join(command)}")
        print(f"lazypatch run: command not found: {command[0]!r}; {hint}", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"lazypatch run: {command[0]!r} is not executable; check its permissions",
              file=sys.stderr)
        return 126
    return 0   # not reached: exec replaces this process


def options_after_the_command(command: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """A note when an option of `lazypatch run` (``--enable device``) follows the
    command: it goes to the program, which may take it for its own, so the run goes
    on; but the likely mistake is named with the corrected command line, or "" ."""
    run = next(action for action in parser._subparsers._group_actions  # type: ignore[union-attr]
               if isinstance(action, argparse._SubParsersAction)).choices["run"]
    options = {option for action in run._actions for option in action.option_strings
               if option.startswith("--") and option != "--help"}
    for index, word in enumerate(command[1:], start=1):
        option = word.split("=", 1)[0]
        if option in options:
            import shlex
            taken = command[index:index + (1 if "=" in word or index + 1 >= len(command)
                                           else 2)]
            rest = [*command[:index], *command[index + len(taken):]]
            # the script when there is one (`python train.py --enable x`), else the program
            program = next((word for word in command[1:index] if not word.startswith("-")),
                           os.path.basename(command[0]))
            return (f"{' '.join(taken)} comes after the command, so it goes to "
                    f"{program!r}, not to lazypatch; if it was meant "
                    f"for lazypatch, write: lazypatch run {shlex.join(taken)} -- "
                    f"{shlex.join(rest)}")
    return ""


def command_interpreter(program: str, environment: Dict[str, str]) -> Optional[str]:
    """The Python interpreter ``program`` runs: itself when it is one (``python``,
    ``python3.11``), the one its ``#!`` line names when it is a Python script
    (``torchrun``, ``pytest``), else None (not a Python program, or not found)."""
    import re
    import shutil
    found = shutil.which(program, path=environment.get("PATH")) or program
    if re.fullmatch(r"python[0-9.]*", os.path.basename(found)):
        return found
    try:
        with open(found, "rb") as handle:
            first = handle.readline(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!") or "python" not in first:
        return None
    words = first[2:].split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [word for word in words[1:] if not word.startswith("-")]
        return shutil.which(names[0], path=environment.get("PATH")) if names else None
    return words[0]


def other_interpreter_problem(program: str, environment: Dict[str, str]) -> str:
    """Why ``program`` would run unpatched ("" when it will activate): it runs another
    Python than this one, where lazypatch's bootstrap stays inert (a venv that is not
    activated, conda, pyenv: ``python`` on PATH is not ``sys.executable``)."""
    interpreter = command_interpreter(program, environment)
    if interpreter is None:
        return ""
    # Not realpath: a venv's python is a symlink to its base interpreter, and the
    # environment (sys.prefix, what it can import) is what matters.
    if os.path.abspath(interpreter) == os.path.abspath(sys.executable):
        return ""
    probe = "import sys; print(sys.prefix + '|' + sys.implementation.cache_tag)"
    try:
        result = subprocess.run([interpreter, "-I", "-c", probe], capture_output=True,
                                text=True, timeout=60)
        theirs = result.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        theirs = ""
    if theirs == f"{sys.prefix}|{sys.implementation.cache_tag}":
        return ""          # another name for this very interpreter (python3 -> python3.11)
    what = f"{program!r} runs {interpreter}" if program != interpreter else f"{program!r}"
    return (f"{what}, not the Python lazypatch is installed in ({sys.executable}); the "
            f"program would run unpatched. Run `lazypatch run -- {sys.executable} ...`, "
            f"activate that environment first, or install lazypatch into "
            f"{interpreter} and use its `lazypatch run`")


# Python's options that keep ``lazypatch run``'s bootstrap out of the program: -E and -I
# ignore PYTHONPATH (the bootstrap's way in), -S skips site (and so every start-up hook).
IGNORES_PYTHONPATH = {"E": "ignores PYTHON* variables, PYTHONPATH included",
                      "I": "runs isolated, ignoring PYTHONPATH"}
SKIPS_SITE = {"S": "does not run site"}


def python_options(command: Sequence[str], environment: Dict[str, str]) -> str:
    """The one-letter options the Python interpreter of ``command`` starts with: those
    before the program on its command line (``python -IE prog.py``), or those on the
    ``#!`` line of a Python script (``#!/usr/bin/python3 -I``); "" for anything else."""
    program = command[0]
    interpreter = command_interpreter(program, environment)
    if interpreter is None:
        return ""
    if os.path.basename(interpreter) == os.path.basename(program) or interpreter == program:
        words = list(command[1:])
    else:
        words = _shebang_options(program, environment)
    letters = ""
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word in ("-", "--") or not word.startswith("-") or word.startswith("--"):
            break                        # the program, or a long option: no more letters
        body = word[1:]
        for position, letter in enumerate(body):
            if letter in "cm":           # -c CODE, -m MODULE: what follows is the program's
                return letters
            if letter in "WX":           # -W ARG, -X OPTION: the rest (or the next word)
                index += position == len(body) - 1
                break
            letters += letter
    return letters


def _shebang_options(program: str, environment: Dict[str, str]) -> List[str]:
    """The options after the interpreter on a script's ``#!`` line."""
    import shutil
    found = shutil.which(program, path=environment.get("PATH")) or program
    try:
        with open(found, "rb") as handle:
            words = handle.readline(256).decode("utf-8", "replace")[2:].split()
    except OSError:
        return []
    for index, word in enumerate(words):
        if "python" in os.path.basename(word):
            return words[index + 1:]
    return []


def interpreter_option_problem(command: Sequence[str], environment: Dict[str, str]) -> str:
    """Why a Python command's own options would run it unpatched ("" when they do not):
    ``-E``/``-I`` ignore PYTHONPATH (activation by ``lazypatch site install`` still
    works there), ``-S`` skips every start-up hook."""
    letters = python_options(command, environment)
    shown = " ".join(command[:3]) + (" ..." if len(command) > 3 else "")
    for letter, what in SKIPS_SITE.items():
        if letter in letters:
            return (f"`{shown}`: -{letter} {what}, so nothing can activate lazypatch at "
                    f"start and the program would run unpatched. Leave out -{letter}, or "
                    f"make `import lazypatch.auto` the program's first line")
    from ..activate.site_install import status as site_status
    if site_status()["installed"]:
        return ""     # the .pth in site-packages activates it; -E and -I keep site
    for letter, what in IGNORES_PYTHONPATH.items():
        if letter in letters:
            return (f"`{shown}`: -{letter} {what}, which is how `lazypatch run` activates "
                    f"the program: it would run unpatched. Leave out -{letter} (-s alone "
                    f"keeps out the user's site-packages), activate this environment for "
                    f"every process with `lazypatch site install`, or make "
                    f"`import lazypatch.auto` the program's first line and run it without "
                    f"`lazypatch run`")
    return ""


def config_file_problem(path: str) -> str:
    """Why a --config file cannot be used ("" when it can): missing, not TOML, or a
    ``lazypatch`` key that is not a table."""
    if not os.path.isfile(path):
        return "no such file; give the path of a TOML file with a [lazypatch] table"
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return "reading TOML needs Python 3.11+ (tomllib) or the tomli package"
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, ValueError) as error:
        return f"not a valid TOML file ({error})"
    section = data.get("lazypatch", data)
    if not isinstance(section, dict):
        return (f"'lazypatch' must be a table ([lazypatch] with lines such as "
                f"disable = [\"name\"]), not a {type(section).__name__}")
    return ""


def _usage_error(command: str, message: str) -> None:
    print(f"usage error: lazypatch {command}: {message}", file=sys.stderr)


# --- list -----------------------------------------------------------------

def _activate_here(purpose: str) -> None:
    """Activate in this process (even under LAZYPATCH=0) to see what would be registered."""
    from ..activate.configuration import is_off
    if is_off(os.environ.get("LAZYPATCH")):
        print(f"note: LAZYPATCH={os.environ['LAZYPATCH']} turns activation off; "
              f"{purpose} shows what it would register", file=sys.stderr)
        os.environ.pop("LAZYPATCH")
    from ..activate.activation import activate
    activate(f"lazypatch {purpose}")
    # Opt-in packs register only when named; here every patch is to be seen.
    from ..decide.selection import load_opt_in_packs
    load_opt_in_packs(["*"])


def registered_patches() -> List[Dict[str, Any]]:
    """What ``lazypatch list`` shows, one dict per registered patch (from the report records).

    ``applicable`` is False when a required distribution is missing or at another
    version here (``unmet`` says which): such a patch can never apply on this host.
    """
    from ..reports.reporting import report
    keys = ("name", "target", "phase", "enabled", "status", "reason", "source", "tags",
            "requires", "priority", "description")
    rows = []
    for record in report():
        row = {key: record[key] if key != "source" else (record[key] or "?") for key in keys}
        row["unmet"] = list(record["unmet_requirements"])
        row["applicable"] = not row["unmet"]
        rows.append(row)
    return rows


def _selected(arguments: argparse.Namespace, rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows the list filters keep: selectors (as LAZYPATCH_ENABLE reads them), tags,
    enabled-and-applicable."""
    if arguments.patterns:
        from ..decide.selection import select
        chosen, unmatched = select(arguments.patterns)
        for selector in unmatched:
            print(f"note: {selector!r} selects no patch", file=sys.stderr)
        names = {patch.name for patch in chosen}
        rows = [row for row in rows if row["name"] in names]
    if arguments.tag:
        rows = [row for row in rows if set(arguments.tag) & set(row["tags"])]
    if arguments.status:
        rows = [row for row in rows if row["status"] in arguments.status]
    if arguments.enabled:
        rows = [row for row in rows if row["enabled"] and row["applicable"]]
    return rows


def _concerns_this_host(row: Dict[str, Any]) -> bool:
    """Whether a list row is shown without --all: the report's rule (``cannot_apply_here``),
    so that `list` and the report hide, and summarise, the same patches."""
    from ..reports.reporting import cannot_apply_here
    return not cannot_apply_here(dict(row, unmet_requirements=row["unmet"]))


DESCRIPTION_WIDTH = 60   # the full text is in `lazypatch list --json`


def _shortened(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def _list(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _activate_here("list")
    rows = _selected(arguments, registered_patches())
    if arguments.json:
        import json
        print(json.dumps(rows, indent=2, default=str))
        return 0
    filtered = bool(arguments.patterns or arguments.tag or arguments.status or arguments.enabled)
    if not rows:
        print("no patch matches" if filtered else "no patches registered")
        run_statuses = sorted(set(arguments.status) & {"applied", "failed", "reverted"})
        if run_statuses:
            # `list` imports no target, so nothing in its process ever applied: the
            # statuses of a program's run are in that run's report.
            print(f"note: `lazypatch list` runs in a process that imported no target, so no "
                  f"patch is {' or '.join(run_statuses)} here; a program's statuses are in "
                  f"its report: lazypatch run --report 'out/{{pid}}.json' -- python train.py, "
                  f"then lazypatch report out/", file=sys.stderr)
        return 0
    from ..reports.reporting import format_table, hidden_summary, ordered
    # What concerns this host first (the report's order: enabled before disabled);
    # patches that cannot apply here or are off by default are summarised below
    # unless asked for: by --all, or by a selector, tag or status that picked them.
    picked = arguments.all or bool(arguments.patterns or arguments.tag or arguments.status)
    shown = ordered(rows if picked else [row for row in rows if _concerns_this_host(row)])
    hidden = [row for row in rows if not picked and not _concerns_this_host(row)]
    table = [["NAME", "TARGET", "ENABLED", "SOURCE", "TAGS", "REQUIRES", "DESCRIPTION"]]
    for row in shown:
        # "cannot" is explained below the table
        state = "cannot" if not row["applicable"] else "yes" if row["enabled"] else "no"
        table.append([row["name"], row["target"], state, row["source"],
                      ",".join(row["tags"]), "; ".join(row["requires"]) or "-",
                      _shortened(row["description"], DESCRIPTION_WIDTH)])
    print(format_table(table))
    if any(not row["applicable"] for row in shown):
        print("ENABLED 'cannot': a required distribution is missing or at another version "
              "here, so the patch can never apply on this host")
    if hidden:
        print(f"{len(hidden)} not shown (`--all` shows them):")
        for line in hidden_summary([dict(row, unmet_requirements=row["unmet"])
                                    for row in hidden]):
            print("  " + line)
    able = sum(1 for row in rows if row["enabled"] and row["applicable"])
    print(f"{len(rows)} patches, {able} enabled and able to apply here; none of their "
          f"targets was imported")
    return 0


# --- report ---------------------------------------------------------------

def _report(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..reports.merging import load_reports, merge, merged_as_json, render_merged
    from ..reports.reporting import ReportFileError
    try:
        # Files are read one at a time while merging: a bad one stops it here too.
        merged = merge(load_reports(arguments.files))
    except ReportFileError as error:
        _usage_error("report", str(error))
        return USAGE_ERROR
    diffs = ""
    if arguments.diff:
        from ..reports.reporting import render_diffs
        # each group's first process speaks for the group: one diff per patch and change
        diffs = render_diffs([cell for patch in merged["patches"] for cell in patch["cells"]])
    if arguments.format == "json":
        import json
        document = merged_as_json(merged)
        if arguments.diff:
            document["diff"] = diffs
        print(json.dumps(document, indent=2, default=str))
    else:
        print(render_merged(merged, all=arguments.all) + (f"\n\n{diffs}" if diffs else ""))
    if arguments.html:
        from ..files import atomic_write
        from ..reports.report_page import render_page
        try:
            atomic_write(arguments.html, render_page(merged, diff=arguments.diff))
        except OSError as error:
            print(f"lazypatch report: cannot write --html {arguments.html}: {error}",
                  file=sys.stderr)
            return PROBLEMS_FOUND
        print(f"wrote {arguments.html}", file=sys.stderr)
    from ..reports.merging import failures
    return PROBLEMS_FOUND if failures(merged) and not arguments.exit_zero else 0


# --- site -----------------------------------------------------------------

def _site(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..activate import site_install
    directory = arguments.dir
    if directory is not None and not os.path.isdir(directory):
        _usage_error("site", f"--dir {directory}: no such directory")
        return USAGE_ERROR
    try:
        if arguments.action == "install":
            for path in site_install.install(directory):
                print(f"wrote {path}")
            print("every interpreter of this environment now activates lazypatch at "
                  "start-up; LAZYPATCH=0 turns it off for one process")
        elif arguments.action == "uninstall":
            removed = site_install.uninstall(directory)
            for path in removed:
                print(f"removed {path}")
            if not removed:
                print(f"nothing to remove: no lazypatch activation file in "
                      f"{directory or site_install.site_packages()}")
        else:
            state = site_install.status(directory)
            print(f"site directory: {state['directory']}")
            print(f".pth file:   {state['pth']}")
            print(f".start file: {state['start']} (used by Python 3.15+, PEP 829)")
            if state["pth"] == "outdated" or state["start"] == "outdated":
                print("run `lazypatch site install` again to update the files")
            if state["disabled_by_environment"]:
                print("LAZYPATCH=0 is set: activation is off in this shell")
    except PermissionError as error:
        print(f"lazypatch site {arguments.action}: permission denied: {error.filename}; "
              f"use a virtual environment you own (or run with the needed rights)",
              file=sys.stderr)
        return PROBLEMS_FOUND
    except OSError as error:
        print(f"lazypatch site {arguments.action}: {error}", file=sys.stderr)
        return PROBLEMS_FOUND
    return 0


# --- doctor ---------------------------------------------------------------

def _doctor(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .doctor import diagnose, render
    if arguments.runs < 0:
        _usage_error("doctor", "--runs must be 0 or more")
        return USAGE_ERROR
    findings = diagnose(imports=arguments.imports, runs=arguments.runs)
    if arguments.json:
        import json
        print(json.dumps(findings, indent=2, default=str))
    else:
        print(render(findings))
    return PROBLEMS_FOUND if findings["problems"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
