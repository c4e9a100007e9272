"""Configuration: environment variables, a TOML file and pyproject.toml, read into one object.

Precedence, first wins: the environment, the ``LAZYPATCH_CONFIG`` file,
``[tool.lazypatch]`` in the current directory's ``pyproject.toml``. TOML keys
are the variable names without ``LAZYPATCH_``, in lower case; keys nobody
declared yet are kept and checked at the end of activation, once the packs
have declared theirs (``warn_unknown_settings``).

Parsed by hand (no ``re``): this runs at interpreter start-up under
sitecustomize activation. Bad values never raise: they emit a
``ConfigurationWarning`` that names the variable and the accepted values,
and the default is used, because configuration mistakes must not break the
user's program. Configuration flows one way: ``read()`` builds a
``Configuration``; the engine stores it in ``state.STATE`` and hands its
values down; nothing here reads engine modules other than ``state``.
"""

import os

from ..state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, List, Mapping, Optional, Tuple

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
    "LAZYPATCH_REPORT": "path of a JSON report written at exit; {host}, {node}, {rank}, "
                        "{local_rank}, {worker} and {pid} are filled in",
    "LAZYPATCH_CONFIG": "path of a TOML file with the same settings (keys in lower case)",
    "LAZYPATCH_PLUGINS": "0 skips plugin packs from installed distributions",
    "LAZYPATCH_CACHE_DIR": "directory of the plugin-pack cache (default ~/.cache/lazypatch)",
    "LAZYPATCH_TRACK_CALLS": "how calls of replacements are counted for the report: auto "
                             "(sys.monitoring on Python 3.12+, none before), wrappers, off",
    "LAZYPATCH_TRUST_PROJECT_CONFIG": "1 trusts [tool.lazypatch] of ./pyproject.toml like a "
                                      "file you named: it may then import modules and write "
                                      "outside the project",
}

WORKER_VARIABLE = "LAZYPATCH_WORKER"

# The package of the built-in packs: activation imports it (selection declares its
# OPT_IN ones on demand too).
BUILTIN_PACKS = "lazypatch.registry"

# Set by lazypatch itself, never by users: accepted silently in the
# environment, refused in files, and named in no message or help text.
INTERNAL_VARIABLES: "Dict[str, str]" = {
    "LAZYPATCH_RUN_PYTHON": "the interpreter `lazypatch run` was started with; "
                            "the bootstrap stays inert under any other interpreter",
    "LAZYPATCH_ACTIVATING": "set while a process activates, so that a child "
                            "started during activation does not activate again",
    "LAZYPATCH_DEVICE_NOTICE_SHOWN": "set once the device pack's start-up line was printed, "
                                     "so that child processes do not print it again",
    "LAZYPATCH_WORKER": "the name of the Ray or Dask worker this process is, set by "
                        "lazypatch.integrations for {worker} in report paths",
    "LAZYPATCH_RAY_USER_HOOK": "the user's own RAY_RUNTIME_ENV_HOOK, which `lazypatch run` "
                               "replaced by lazypatch's and which lazypatch's runs first",
    "LAZYPATCH_SAID": "fingerprints of the warnings a parent process showed, so that its "
                      "children do not repeat them (notices.notify)",
    "LAZYPATCH_ENABLE_FROM_FILE": "the `enable` of a TOML file (carried apart from "
                                  "LAZYPATCH_ENABLE: a file cannot enable an unsafe patch)",
    "LAZYPATCH_SETTINGS_FROM": "where `lazypatch run` read each setting of a TOML file "
                               "(`LAZYPATCH_DEVICE=device in /p/pyproject.toml`, a line each), "
                               "so that the processes it starts name them as the user wrote them",
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
        value = environment.get(variable, "").strip()
        # ASCII digits only: str.isdigit() accepts "²", which int() refuses.
        if value.isascii() and value.isdigit():
            return variable
    return None


def declare_variable(name: str, meaning: str) -> None:
    """Declare an environment variable a pack reads, so it is not reported as unknown.

    The declaration is all lazypatch needs: the variable is accepted in the
    environment, as a lower-case key in TOML files, as a ``lazypatch run``
    flag, and listed in ``lazypatch run --help``. A meaning that starts with
    "path" or "directory" marks a path, made absolute by ``lazypatch run``.
    """
    if not isinstance(name, str) or not name.startswith("LAZYPATCH_"):
        raise ValueError(f"declare_variable: {name!r} must be a LAZYPATCH_* variable name")
    with STATE.lock:
        STATE.declared_variables[name] = str(meaning)


def known_variables() -> "Dict[str, str]":
    """Every variable a user can set, lazypatch's and the packs', with what it means."""
    known = dict(VARIABLES)
    known.update(STATE.declared_variables)
    return known


def path_variables() -> "List[str]":
    """Variables holding a file or directory path (their meaning says "path"/"directory")."""
    return [name for name, meaning in known_variables().items()
            if meaning.startswith(("path", "directory"))]


def suggestion(word: str, candidates: "List[str]") -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or "" when none is close.

    Only called on an error path, so ``difflib`` (which imports ``re`` and
    more) is never imported by a correct configuration.
    """
    from difflib import get_close_matches
    close = get_close_matches(word, candidates, n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(item) for item in close) + "?)"


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
    alert(f"lazypatch: {name}={value!r} is not understood; use one of "
          f"{', '.join(TRUE_WORDS + FALSE_WORDS)}. Using {int(default)}.")
    return default


def parse_log_level(value: "Optional[str]") -> "Optional[str]":
    """The LAZYPATCH_LOG level name, or None (with a warning) when invalid."""
    if value is None or not value.strip():
        return None
    level = value.strip().upper()
    if level in LOG_LEVELS or (level.isascii() and level.isdigit()):
        return level
    alert(f"lazypatch: LAZYPATCH_LOG={value!r} is not a log level; use one of "
          f"{', '.join(LOG_LEVELS)}. Leaving the 'lazypatch' logger as it is.")
    return None


class Configuration:
    """The settings activation uses, from the environment and LAZYPATCH_CONFIG."""

    def __init__(self) -> None:
        self.active = True
        self.disable: "List[str]" = []
        self.enable: "List[str]" = []
        # the part of ``enable`` that came from a TOML file (it cannot choose an unsafe patch)
        self.enable_from_files: "List[str]" = []
        self.strict = False
        self.log_level: "Optional[str]" = None
        self.log_all_ranks = False
        self.modules: "List[str]" = []
        self.report_path = ""
        self.plugins = True
        self.extra: "Dict[str, str]" = {}   # settings from TOML files, as LAZYPATCH_* names
        # LAZYPATCH_* name -> (file, key) of every TOML key read, checked by
        # warn_unknown_settings once the packs have declared their variables.
        self.file_keys: "Dict[str, Tuple[str, str]]" = {}
        # The pyproject.toml read without trust (nobody named it), if any: a pack's path
        # setting it holds is checked when the pack reads it (``setting``), since packs
        # declare which settings are paths after the files are read.
        self.untrusted_project = ""
        self.refused_from_project: "Dict[str, bool]" = {}
        # The run's settings as LAZYPATCH_* names (environment and files merged, the
        # file path and internal variables left out) and their fingerprint; when
        # PYTHONLAZYPATCH came from the launching process, its fingerprint and the
        # settings this process changed: name -> (the launcher's value, this one's).
        self.settings: "Dict[str, str]" = {}
        self.fingerprint = ""
        self.driver_fingerprint = ""
        self.driver_differences: "Dict[str, Tuple[str, str]]" = {}


PYPROJECT = "pyproject.toml"


def _from_pyproject(configuration: "Configuration") -> "Dict[str, str]":
    """Settings of ``[tool.lazypatch]`` in the current directory's pyproject.toml.

    Most projects have a pyproject.toml and most have no such table: the text
    is searched first, so that tomllib and setting_files.py are loaded only when
    there is one.
    """
    try:
        with open(PYPROJECT, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, ValueError):
        return {}
    if "tool.lazypatch" not in text:
        return {}
    from .setting_files import from_pyproject
    return from_pyproject(os.path.abspath(PYPROJECT), configuration, NOT_IN_FILES,
                          _trusts_project_file, path_variables, alert)


def _trusts_project_file() -> bool:
    return parse_flag("LAZYPATCH_TRUST_PROJECT_CONFIG",
                      os.environ.get("LAZYPATCH_TRUST_PROJECT_CONFIG"))


# Variables that name the file itself, or that only lazypatch sets.
NOT_IN_FILES = ("LAZYPATCH_CONFIG",) + tuple(INTERNAL_VARIABLES)

# The last configuration read, keyed by the LAZYPATCH* variables it came from:
# reading the same environment again returns it without warning a second time.
_last_read: "Optional[Tuple[tuple, Configuration]]" = None


def read(environ: "Optional[Mapping[str, str]]" = None) -> "Configuration":
    """Read the configuration; the environment overrides the TOML file.

    Never raises: a bad value warns (through ``notices``, so that no warnings
    filter can turn it into an exception) and its default is used.
    """
    global _last_read
    source = os.environ if environ is None else environ
    # The internal variables are not settings: LAZYPATCH_ACTIVATING appears during
    # activation and must not make the same settings be read (and warned about) again.
    # Keys first, values only for ours: os.environ decodes every item it hands out.
    key = tuple(sorted((name, source[name]) for name in lazypatch_names(source)
                       if (name.startswith("LAZYPATCH") and (name == "LAZYPATCH" or
                                                             name.startswith("LAZYPATCH_"))
                           and name not in INTERNAL_VARIABLES) or name == PORTABLE_VARIABLE
                       )) + (_current_directory(),)
    if _last_read is not None and _last_read[0] == key:
        return _last_read[1]
    configuration = _read(source)
    _last_read = (key, configuration)
    return configuration


def lazypatch_names(source: "Mapping[str, str]") -> "List[str]":
    """The names in ``source`` that may be ours (LAZYPATCH*, PYTHONLAZYPATCH); every name
    for a mapping other than ``os.environ``.

    Iterating ``os.environ`` decodes every variable's name in Python, about a twentieth
    of activation in an ordinary environment (benchmarks/COSTS.md): its raw names are
    filtered first and only the candidates decoded."""
    raw = getattr(source, "_data", None) if source is os.environ else None
    if type(raw) is not dict:
        return list(source)
    decode = source.decodekey   # type: ignore[attr-defined]
    # Raw names are bytes where the platform has a bytes environment (POSIX), else str.
    raw_names: "Any" = _RAW_NAMES[os.supports_bytes_environ]   # bytes or str alike
    prefix, portable, separator = raw_names
    # Found in the names joined, in C: a Python loop over a hundred names would cost
    # most of what not decoding them saves. Names cannot hold a NUL, so it marks where
    # each one starts, and each piece after a split at NUL + prefix is the rest of a
    # name of ours (up to the next NUL).
    pieces = (separator + separator.join(raw)).split(separator + prefix)
    ours = [decode(prefix + piece.split(separator, 1)[0]) for piece in pieces[1:]]
    if portable in raw:
        ours.append(decode(portable))
    return ours


_RAW_NAMES = (("LAZYPATCH", "PYTHONLAZYPATCH", "\0"), (b"LAZYPATCH", b"PYTHONLAZYPATCH", b"\0"))


# Reads that must say nothing (portable_value: the processes that use the value
# report its problems), innermost last.
_quiet: "List[bool]" = []


def _current_directory() -> str:
    """The working directory (its pyproject.toml is read), or "" when it was deleted."""
    try:
        return os.getcwd()
    except OSError:   # started in a directory removed since: no pyproject.toml to read
        return ""


def alert(message: str, category: "Optional[type]" = None) -> None:
    """A configuration warning (``ConfigurationWarning`` unless ``category`` says
    otherwise), said once per process tree and never a crash (``notices.notify``)."""
    # Through notices.notify, as every warning: a torchrun job or a DataLoader with
    # workers must not repeat it from every process, and -W error must not crash.
    # notices and errors load only on this path (benchmarks/COSTS.md).
    if not (_quiet and _quiet[-1]):
        from ..notices import notify
        if category is None:
            from ..errors import ConfigurationWarning
            category = ConfigurationWarning
        notify(message, category)


def _read(source: "Mapping[str, str]") -> "Configuration":
    # Only our variables: copying all of os.environ decodes every item of it.
    environment: "Dict[str, str]" = {name: source[name] for name in lazypatch_names(source)
                                     if name.startswith("LAZYPATCH")}
    configuration = Configuration()
    portable = source.get(PORTABLE_VARIABLE)
    driver = decode_settings(portable) if portable is not None else None
    if driver is not None:
        # The launching process read its files already (a node of its own may have
        # neither the LAZYPATCH_CONFIG file nor the same pyproject.toml): its
        # settings replace the file layers; this process's environment still wins.
        merged = dict(driver[1])
    else:
        # Precedence, lowest first: pyproject.toml, the LAZYPATCH_CONFIG file, the environment.
        merged = _from_pyproject(configuration)
        config_path = environment.get("LAZYPATCH_CONFIG", "").strip()
        if config_path:
            from .setting_files import from_file
            merged.update(from_file(config_path, configuration.file_keys, NOT_IN_FILES, alert))
        # A file's `enable` travels apart: selection lets it choose no unsafe patch.
        if "LAZYPATCH_ENABLE" in merged:
            merged["LAZYPATCH_ENABLE_FROM_FILE"] = merged.pop("LAZYPATCH_ENABLE")
    merged.update({key: value for key, value in environment.items()
                   if key == "LAZYPATCH" or key.startswith("LAZYPATCH_")})
    configuration.settings = run_settings(merged)
    if driver is not None:
        _compare_with_driver(configuration, driver)
    configuration.active = parse_flag("LAZYPATCH", merged.get("LAZYPATCH"), default=True)
    configuration.disable = split_list(merged.get("LAZYPATCH_DISABLE", ""))
    configuration.enable = split_list(merged.get("LAZYPATCH_ENABLE", ""))
    if "LAZYPATCH_ENABLE" not in merged:   # the environment's enable replaces a file's
        configuration.enable_from_files = split_list(merged.get("LAZYPATCH_ENABLE_FROM_FILE", ""))
        configuration.enable += configuration.enable_from_files
    configuration.strict = parse_flag("LAZYPATCH_STRICT", merged.get("LAZYPATCH_STRICT"))
    configuration.log_level = parse_log_level(merged.get("LAZYPATCH_LOG"))
    configuration.log_all_ranks = parse_flag("LAZYPATCH_LOG_ALL_RANKS",
                                             merged.get("LAZYPATCH_LOG_ALL_RANKS"))
    configuration.modules = split_list(merged.get("LAZYPATCH_MODULES", ""))
    configuration.report_path = _from_files_made_absolute(
        "LAZYPATCH_REPORT", merged.get("LAZYPATCH_REPORT", "").strip(), environment,
        configuration.file_keys)
    configuration.plugins = parse_flag("LAZYPATCH_PLUGINS", merged.get("LAZYPATCH_PLUGINS"),
                                       default=True)
    configuration.extra = {key: value for key, value in merged.items()
                           if key not in environment}
    return configuration


def adopt_without_rules(configuration: "Configuration") -> bool:
    """Put ``configuration`` in force if it has no selection rules, and say whether it did;
    when it has some, ``decide.selection.configure`` must adopt it (and decide by them)."""
    # With no LAZYPATCH_ENABLE/DISABLE rules, configure() would only store these fields:
    # then decide/ is not loaded at activation at all (benchmarks/COSTS.md).
    if configuration.enable or configuration.disable:
        return False
    with STATE.lock:
        STATE.configuration = configuration
        STATE.strict = configuration.strict
        STATE.enable_rules = []
        STATE.disable_rules = []
    return True


def warn_unknown_settings(configuration: "Optional[Configuration]" = None,
                          environ: "Optional[Mapping[str, str]]" = None) -> None:
    """Warn about LAZYPATCH_* variables and TOML keys nobody declared (likely typos),
    with the closest accepted name. Called at the end of activation, once every
    pack had its chance to declare its variables."""
    environment = os.environ if environ is None else environ
    known = known_variables()
    for variable in sorted(lazypatch_names(environment)):   # not every name decoded
        if variable.startswith("LAZYPATCH_") and variable not in known \
                and variable not in INTERNAL_VARIABLES:
            alert(f"lazypatch: unknown environment variable {variable}"
                  f"{suggestion(variable, list(known))}; `lazypatch run --help` lists "
                  f"the accepted ones")
    if configuration is None:
        return
    keys = [name[len("LAZYPATCH_"):].lower() for name in known if name not in NOT_IN_FILES]
    for variable, (path, key) in sorted(configuration.file_keys.items()):
        if variable in known and variable not in NOT_IN_FILES:
            continue
        alert(f"lazypatch: unknown key {key!r} in {path}{suggestion(key.lower(), keys)}; "
              f"`lazypatch run --help` lists the accepted keys (variable names without "
              f"LAZYPATCH_, in lower case)")
    # Settings the launching process passed on (PYTHONLAZYPATCH: `lazypatch run` read its
    # --config file and pyproject.toml there and sent their content, not the files): a
    # misspelled key arrives here as a setting nobody declared.
    for variable in sorted(configuration.extra):
        if variable in known or variable in NOT_IN_FILES or variable in configuration.file_keys:
            continue
        key = variable[len("LAZYPATCH_"):].lower() if variable.startswith("LAZYPATCH_") \
            else variable
        alert(f"lazypatch: unknown key {key!r} in the configuration file given to the "
              f"launching `lazypatch run`{suggestion(key, keys)}; `lazypatch run --help` "
              f"lists the accepted keys")


def warn_unknown_variables(environ: "Optional[Mapping[str, str]]" = None) -> None:
    """Warn about LAZYPATCH_* variables nobody declared (``warn_unknown_settings``)."""
    warn_unknown_settings(None, environ)


def _from_files_made_absolute(variable: str, value: str, environment: "Mapping[str, str]",
                              file_keys: "Dict[str, Tuple[str, str]]") -> str:
    """``value`` of a path setting, a relative one from a TOML file joined to that
    file's directory: `report = "out/r.json"` in a project's pyproject.toml means the
    project's out/, whichever directory the program was started from (or changes to).
    Values from the environment are left as given (`lazypatch run` made them absolute)."""
    if not value or variable in environment or variable not in file_keys \
            or variable not in path_variables():
        return value
    value = os.path.expanduser(value)   # TOML has no shell to expand `~/.cache/...`
    if os.path.isabs(value):
        return value
    return os.path.join(os.path.dirname(os.path.abspath(file_keys[variable][0])), value)


def setting(name: str, default: str = "") -> str:
    """A setting by its variable name (every setting, the engine's and the packs'): the
    environment variable, else the LAZYPATCH_CONFIG file's or pyproject.toml's key
    (a relative path there is relative to the file), else ``default``."""
    value = os.environ.get(name)
    if value is not None:
        return value
    configuration = STATE.configuration
    if configuration is not None and name in configuration.extra:
        value = configuration.extra[name]
        origin = configuration.file_keys.get(name)
        if origin is not None and origin[0] == configuration.untrusted_project:
            from .setting_files import outside_project, refusal  # loaded: it read the file
            what = outside_project(name, value, origin[0], path_variables())
            if what:   # a pack's path setting, declared after the file was read
                if name not in configuration.refused_from_project:
                    configuration.refused_from_project[name] = True
                    alert(refusal(origin[0], name, what))
                return default
        return _from_files_made_absolute(name, value, {}, configuration.file_keys)
    return default


def setting_source(name: str) -> str:
    """Where the value of setting ``name`` comes from, named as the user wrote it: the
    variable itself ("LAZYPATCH_DEVICE") when the environment sets it, "device in
    /path/pyproject.toml" for a file's key (read here, or by the `lazypatch run` that
    started this process), "" when it is not set at all."""
    if name in os.environ:
        return name
    configuration = STATE.configuration
    if configuration is not None and name in configuration.extra:
        found = configuration.file_keys.get(name)
        if found:
            return f"{found[1]} in {found[0]}"
        for line in os.environ.get("LAZYPATCH_SETTINGS_FROM", "").splitlines():
            variable, _, where = line.partition("=")
            if variable == name and where:
                return where
        return name
    return ""


def settings_from_files(configuration: "Configuration",
                        environ: "Mapping[str, str]") -> str:
    """LAZYPATCH_SETTINGS_FROM's value for processes started with ``environ``: each
    setting a TOML file of ``configuration`` (read from ``environ``) gives them and
    their environment does not, with its key and file."""
    return "\n".join(f"{variable}={key} in {path}"
                     for variable, (path, key) in sorted(configuration.file_keys.items())
                     if variable not in environ)


# --- one portable activation ------------------------------------------------
# Launchers that start processes on other machines forward only some variables:
# DeepSpeed's multi-node runner those whose names start with PYTHON, MLFLOW, MV2,
# UCX (its EXPORT_ENVS) and the accelerator's, MPI launchers what -x/-genv name.
# Every LAZYPATCH_* setting would be dropped there, so `lazypatch run` also puts
# the whole run's settings in this one PYTHON-prefixed variable (``portable.py``
# encodes it; it is imported only when the variable is there or being written).
PORTABLE_VARIABLE = "PYTHONLAZYPATCH"


def run_settings(merged: "Mapping[str, str]") -> "Dict[str, str]":
    """The settings that make a run what it is: every LAZYPATCH* value but the
    configuration file's path (its content is merged in) and lazypatch's own
    bookkeeping, and no empty value (empty means "not set")."""
    return {name: value for name, value in merged.items()
            if (name not in NOT_IN_FILES or name == "LAZYPATCH_ENABLE_FROM_FILE")
            and value.strip() and (name == "LAZYPATCH" or name.startswith("LAZYPATCH_"))}


def settings_fingerprint(settings: "Mapping[str, str]") -> str:
    """Eight hex digits that are equal exactly when two processes' settings are."""
    from ..notices import fingerprint  # only on this path: see benchmarks/COSTS.md
    return fingerprint("\n".join(f"{name}={settings[name]}" for name in sorted(settings)))


def encode_settings(settings: "Mapping[str, str]") -> str:
    """The PYTHONLAZYPATCH value of ``settings`` (see ``portable.encode``)."""
    from .portable import encode
    return encode(settings, settings_fingerprint(settings))


def decode_settings(value: str) -> "Optional[Tuple[str, Dict[str, str]]]":
    """The launching process's (fingerprint, settings) from a PYTHONLAZYPATCH value,
    or None with a warning when the value is not one or was changed on its way."""
    from .portable import decode
    try:
        fingerprint, settings = decode(value)
    except ValueError as error:
        alert(f"lazypatch: {PORTABLE_VARIABLE}={value[:80]!r} is not the value `lazypatch "
              f"run` writes ({error}); ignoring it, so this process uses its own "
              f"LAZYPATCH_* settings")
        return None
    if settings_fingerprint(settings) != fingerprint:
        alert(f"lazypatch: {PORTABLE_VARIABLE} was changed on its way (its fingerprint "
              f"{fingerprint} does not match its settings); ignoring it, so this process "
              f"uses its own LAZYPATCH_* settings")
        return None
    return fingerprint, settings


def _compare_with_driver(configuration: "Configuration",
                         driver: "Tuple[str, Dict[str, str]]") -> None:
    """Record, and say once, which settings of this process are not the launcher's."""
    fingerprint, settings = driver
    configuration.driver_fingerprint = fingerprint
    configuration.fingerprint = settings_fingerprint(configuration.settings)
    if configuration.fingerprint == fingerprint:
        return
    here = configuration.settings
    differences = {name: (settings.get(name, ""), here.get(name, ""))
                   for name in sorted(set(settings) | set(here))
                   if settings.get(name, "") != here.get(name, "")}
    configuration.driver_differences = differences
    listed = "; ".join(f"{name}={theirs!r} there, {ours!r} here"
                       for name, (theirs, ours) in differences.items())
    alert(f"lazypatch: this process's settings differ from those of the process that "
          f"launched the run ({PORTABLE_VARIABLE} fingerprint {fingerprint}, here "
          f"{configuration.fingerprint}): {listed}. This process's own LAZYPATCH_* "
          f"variables win; unset them here to run what the launcher runs")


def portable_value(environ: "Optional[Mapping[str, str]]" = None) -> str:
    """The PYTHONLAZYPATCH value for processes started with ``environ`` (default:
    this process's environment): the settings they would read, files merged in.

    Reads quietly: a bad value is reported by the processes that use it.
    """
    return encode_settings(quiet_read(os.environ if environ is None else environ).settings)


def quiet_read(environ: "Mapping[str, str]") -> "Configuration":
    """The configuration processes started with ``environ`` will read, read without a
    word: a bad value is reported by the processes that use it."""
    _quiet.append(True)
    try:
        return _read(environ)
    finally:
        _quiet.pop()


def settings_facts(configuration: "Optional[Configuration]" = None) -> "Dict[str, object]":
    """For reports: this process's settings fingerprint, the launcher's (``""`` when
    no PYTHONLAZYPATCH arrived) and the settings that differ from the launcher's."""
    configuration = configuration or STATE.configuration
    if configuration is None:
        return {"fingerprint": "", "driver_fingerprint": "", "differences": {}}
    if not configuration.fingerprint:   # computed when first asked: activation needs none
        configuration.fingerprint = settings_fingerprint(configuration.settings)
    return {"fingerprint": configuration.fingerprint,
            "driver_fingerprint": configuration.driver_fingerprint,
            "differences": {name: {"driver": theirs, "here": ours} for name, (theirs, ours)
                            in configuration.driver_differences.items()}}
