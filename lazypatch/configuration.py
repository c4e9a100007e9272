"""Configuration: environment variables and an optional TOML file, read into one object.

Parsed by hand (no ``re``): this runs at interpreter start-up under
sitecustomize activation. Bad values never raise: they emit a
``ConfigurationWarning`` that names the variable and the accepted values,
and the default is used, because configuration mistakes must not break the
user's program. Configuration flows one way: ``read()`` builds a
``Configuration``; the engine stores it in ``state.STATE`` and hands its
values down; nothing here reads engine modules other than ``state``.
"""

from __future__ import annotations

import os

from .errors import ConfigurationWarning
from .notices import notify
from .state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Dict, List, Mapping, Optional, Tuple

# The one list of words for a yes/no setting. An empty value means "not set"
# (the default applies): `LAZYPATCH=` must not switch activation off while
# `lazypatch site status` says it is on.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# The one table of log levels, by name, as the logging module numbers them.
LOG_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}

# Every variable lazypatch itself reads, with what it means. Packs add theirs
# through declare_variable() so that a typo such as LAZYPATCH_DISABEL can be
# reported with the accepted names.
VARIABLES: "Dict[str, str]" = {
    "LAZYPATCH": "0 turns every activation off for this process",
    "LAZYPATCH_DISABLE": "comma-separated patch names, globs or tags to turn off",
    "LAZYPATCH_ENABLE": "comma-separated patch names, globs or tags to turn on",
    "LAZYPATCH_STRICT": "1 makes a failing patch fail its target's import",
    "LAZYPATCH_LOG": "level of the 'lazypatch' logger: " + ", ".join(LOG_LEVELS),
    "LAZYPATCH_LOG_ALL_RANKS": "1 logs informational messages on every rank, not only rank 0",
    "LAZYPATCH_MODULES": "comma-separated modules of extra patches to import at activation",
    "LAZYPATCH_REPORT": "path of a JSON report written at exit; {rank} and {pid} are filled in",
    "LAZYPATCH_CONFIG": "path of a TOML file with the same settings (keys in lower case)",
    "LAZYPATCH_PLUGINS": "0 skips plugin packs from installed distributions",
    "LAZYPATCH_CACHE_DIR": "directory of the plugin-pack cache (default ~/.cache/lazypatch)",
    # Set by lazypatch itself, not by users:
    "LAZYPATCH_RUN_PYTHON": "(internal) the interpreter `lazypatch run` was started with; "
                            "the bootstrap stays inert under any other interpreter",
    "LAZYPATCH_ACTIVATING": "(internal) set while a process activates, so that a child "
                            "started during activation does not activate again",
}

# Launchers' rank variables, most specific first: torchrun sets RANK and
# LOCAL_RANK, Slurm SLURM_PROCID, Open MPI OMPI_COMM_WORLD_RANK, MPICH/Intel PMI_RANK.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def current_rank(environ: "Optional[Mapping[str, str]]" = None) -> int:
    """This process's rank from the launcher's environment variables (0 if none).

    Lives here rather than in ``log`` so that reports can name the rank
    without importing ``logging``.
    """
    variable = rank_variable(environ)
    environment = os.environ if environ is None else environ
    return int(environment[variable].strip()) if variable else 0


def rank_variable(environ: "Optional[Mapping[str, str]]" = None) -> "Optional[str]":
    """The launcher variable this process's rank comes from, or None (not launched with ranks)."""
    environment = os.environ if environ is None else environ
    for variable in RANK_VARIABLES:
        if environment.get(variable, "").strip().isdigit():
            return variable
    return None


def declare_variable(name: str, meaning: str) -> None:
    """Declare an environment variable a pack reads, so it is not reported as unknown."""
    if not isinstance(name, str) or not name.startswith("LAZYPATCH_"):
        raise ValueError(f"declare_variable: {name!r} must be a LAZYPATCH_* variable name")
    with STATE.lock:
        STATE.declared_variables[name] = str(meaning)


def known_variables() -> "Dict[str, str]":
    """Every variable lazypatch or a pack reads, with what it means."""
    known = dict(VARIABLES)
    known.update(STATE.declared_variables)
    return known


def is_off(value: "Optional[str]") -> bool:
    """Whether a yes/no setting's value says no (unset and empty mean the default)."""
    return value is not None and value.strip().lower() in FALSE_WORDS


def split_list(value: str) -> "List[str]":
    """Split a comma-separated setting, dropping blanks."""
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_flag(name: str, value: "Optional[str]", default: bool = False) -> bool:
    """Read a boolean setting; warn and fall back to ``default`` on a bad value."""
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    if not lowered:
        return default
    notify(f"lazypatch: {name}={value!r} is not understood; use one of "
           f"{', '.join(TRUE_WORDS + FALSE_WORDS)}. Using {int(default)}.",
           ConfigurationWarning, stacklevel=3)
    return default


def parse_log_level(value: "Optional[str]") -> "Optional[str]":
    """The LAZYPATCH_LOG level name, or None (with a warning) when invalid."""
    if value is None or not value.strip():
        return None
    level = value.strip().upper()
    if level in LOG_LEVELS or level.isdigit():
        return level
    notify(f"lazypatch: LAZYPATCH_LOG={value!r} is not a log level; use one of "
           f"{', '.join(LOG_LEVELS)}. Leaving the 'lazypatch' logger as it is.",
           ConfigurationWarning, stacklevel=3)
    return None


class Configuration:
    """The settings activation uses, from the environment and LAZYPATCH_CONFIG."""

    def __init__(self) -> None:
        self.active = True
        self.disable: "List[str]" = []
        self.enable: "List[str]" = []
        self.strict = False
        self.log_level: "Optional[str]" = None
        self.log_all_ranks = False
        self.modules: "List[str]" = []
        self.report_path = ""
        self.plugins = True
        self.extra: "Dict[str, str]" = {}   # pack variables from the TOML file


def _from_file(path: str) -> "Dict[str, str]":
    """Settings from a TOML file, as LAZYPATCH_<KEY> strings; warns on problems."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        notify("lazypatch: LAZYPATCH_CONFIG needs Python 3.11+ (tomllib); ignoring it",
               ConfigurationWarning, stacklevel=3)
        return {}
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, ValueError) as error:
        notify(f"lazypatch: cannot read LAZYPATCH_CONFIG={path!r}: {error}; ignoring it",
               ConfigurationWarning, stacklevel=3)
        return {}
    section = data.get("lazypatch", data)
    if not isinstance(section, dict):
        notify(f"lazypatch: LAZYPATCH_CONFIG={path!r}: 'lazypatch' must be a table of "
               f"settings ([lazypatch] with lines such as disable = [\"name\"]), got a "
               f"{type(section).__name__}; ignoring the file", ConfigurationWarning, stacklevel=3)
        return {}
    known = known_variables()
    settings: "Dict[str, str]" = {}
    for key, value in section.items():
        variable = "LAZYPATCH_" + str(key).upper()
        if variable not in known or variable in NOT_IN_FILES:
            accepted = sorted(name[10:].lower() for name in known
                              if name.startswith("LAZYPATCH_") and name not in NOT_IN_FILES)
            notify(f"lazypatch: unknown key {key!r} in {path}; accepted keys: "
                   f"{', '.join(accepted)}", ConfigurationWarning, stacklevel=3)
            continue
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
        elif isinstance(value, dict):
            notify(f"lazypatch: key {key!r} in {path} is a table; give a string, a number, "
                   f"a boolean or a list; ignoring it", ConfigurationWarning, stacklevel=3)
            continue
        settings[variable] = str(value)
    return settings


# Variables that only lazypatch itself sets, or that name the file itself.
NOT_IN_FILES = ("LAZYPATCH_CONFIG", "LAZYPATCH_RUN_PYTHON", "LAZYPATCH_ACTIVATING")

# The last configuration read, keyed by the LAZYPATCH* variables it came from:
# reading the same environment again returns it without warning a second time.
_last_read: "Optional[Tuple[tuple, Configuration]]" = None


def read(environ: "Optional[Mapping[str, str]]" = None) -> Configuration:
    """Read the configuration; the environment overrides the TOML file.

    Never raises: a bad value warns (through ``notices``, so that no warnings
    filter can turn it into an exception) and its default is used.
    """
    global _last_read
    source = os.environ if environ is None else environ
    key = tuple(sorted((name, value) for name, value in source.items()
                       if name == "LAZYPATCH" or name.startswith("LAZYPATCH_")))
    if _last_read is not None and _last_read[0] == key:
        return _last_read[1]
    configuration = _read(source)
    _last_read = (key, configuration)
    return configuration


def _read(source: "Mapping[str, str]") -> Configuration:
    environment: "Dict[str, str]" = dict(source)
    config_path = environment.get("LAZYPATCH_CONFIG", "").strip()
    merged = _from_file(config_path) if config_path else {}
    merged.update({key: value for key, value in environment.items()
                   if key == "LAZYPATCH" or key.startswith("LAZYPATCH_")})
    configuration = Configuration()
    configuration.active = parse_flag("LAZYPATCH", merged.get("LAZYPATCH"), default=True)
    configuration.disable = split_list(merged.get("LAZYPATCH_DISABLE", ""))
    configuration.enable = split_list(merged.get("LAZYPATCH_ENABLE", ""))
    configuration.strict = parse_flag("LAZYPATCH_STRICT", merged.get("LAZYPATCH_STRICT"))
    configuration.log_level = parse_log_level(merged.get("LAZYPATCH_LOG"))
    configuration.log_all_ranks = parse_flag("LAZYPATCH_LOG_ALL_RANKS",
                                             merged.get("LAZYPATCH_LOG_ALL_RANKS"))
    configuration.modules = split_list(merged.get("LAZYPATCH_MODULES", ""))
    configuration.report_path = merged.get("LAZYPATCH_REPORT", "").strip()
    configuration.plugins = parse_flag("LAZYPATCH_PLUGINS", merged.get("LAZYPATCH_PLUGINS"),
                                       default=True)
    configuration.extra = {key: value for key, value in merged.items()
                           if key not in environment}
    return configuration


def warn_unknown_variables(environ: "Optional[Mapping[str, str]]" = None) -> None:
    """Warn about LAZYPATCH_* variables nobody declared (likely typos)."""
    environment = os.environ if environ is None else environ
    known = known_variables()
    unknown = sorted(key for key in environment
                     if key.startswith("LAZYPATCH_") and key not in known)
    if unknown:
        notify(f"lazypatch: unknown environment variable(s) {', '.join(unknown)}; "
               f"accepted: {', '.join(sorted(known))}", ConfigurationWarning, stacklevel=3)


def setting(name: str, default: str = "") -> str:
    """A pack setting: the environment variable, else the LAZYPATCH_CONFIG value."""
    value = os.environ.get(name)
    if value is not None:
        return value
    configuration = STATE.configuration
    if configuration is not None:
        return configuration.extra.get(name, default)
    return default
