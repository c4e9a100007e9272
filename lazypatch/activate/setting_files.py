"""Settings from TOML files: the ``LAZYPATCH_CONFIG`` file and ``[tool.lazypatch]`` of the
current directory's ``pyproject.toml``, and what a project file nobody named may not set.

``configuration.py`` loads this module only when there is such a file to read (most
processes have none): its functions were about a sixth of the configuration module's
code on the path of every activation (benchmarks/COSTS.md). Each problem is said through
the ``say`` its caller passes (``configuration.alert``: this module imports nothing of
the configuration, which imports it), so that a quiet read stays quiet and every
warning goes through the one channel.
"""

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# What a pyproject.toml found in the current directory may not do, since nobody named
# it: any Python process of an environment where lazypatch is installed site-wide reads
# it, so a downloaded model folder's file must not import modules, write files outside
# its own folder, or (see selection.py) enable an unsafe patch. docs/configuration.md.
PROJECT_FILE_REFUSED = {"LAZYPATCH_MODULES": "imports modules",
                        "LAZYPATCH_PLUGINS": "chooses which installed code runs"}
PYPROJECT_TABLE = "[tool.lazypatch]"


def load_toml(path: str, what: str, say: "Callable[[str], None]") -> "Optional[dict]":
    """A TOML file's data, or None (with a problem naming ``what``) when unreadable."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the tomli package is tomllib's original
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            say(f"lazypatch: {what} needs Python 3.11+ (tomllib) or the tomli "
                            f"package; ignoring {path}")
            return None
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, ValueError) as error:
        say(f"lazypatch: cannot read {what}={path!r}: {error}; ignoring it")
        return None
    except RecursionError:
        # tomllib parses nested arrays and tables recursively: a file nested deeper than
        # the interpreter's recursion limit must not stop `import lazypatch`.
        say(f"lazypatch: cannot read {what}={path!r}: its values are nested too "
                        f"deeply to parse (settings are flat keys and short lists); ignoring it")
        return None


def settings_of(section: "Dict[str, object]", path: str,
                file_keys: "Dict[str, Tuple[str, str]]", not_in_files: "Sequence[str]",
                say: "Callable[[str], None]") -> "Dict[str, str]":
    """A TOML table's settings as LAZYPATCH_<KEY> strings. Keys nobody declared
    yet are kept: a pack imported later may declare them (``warn_unknown_settings``
    checks them once activation has loaded the packs)."""
    settings: "Dict[str, str]" = {}
    for key, value in section.items():
        variable = "LAZYPATCH_" + str(key).upper()
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
        elif isinstance(value, dict):
            say(f"lazypatch: key {key!r} in {path} is a table; give a string, a "
                            f"number, a boolean or a list; ignoring it")
            continue
        if variable in not_in_files:
            file_keys[variable] = (path, str(key))   # refused by warn_unknown_settings
            continue
        settings[variable] = str(value)
        file_keys[variable] = (path, str(key))
    return settings


def from_file(path: str, file_keys: "Dict[str, Tuple[str, str]]",
              not_in_files: "Sequence[str]", say: "Callable[[str], None]") -> "Dict[str, str]":
    """Settings of the LAZYPATCH_CONFIG file (its [lazypatch] table, or the whole file)."""
    data = load_toml(path, "LAZYPATCH_CONFIG", say)
    if data is None:
        return {}
    section = data.get("lazypatch", data)
    if not isinstance(section, dict):
        say(f"lazypatch: LAZYPATCH_CONFIG={path!r}: 'lazypatch' must be a table "
                        f"of settings ([lazypatch] with lines such as disable = [\"name\"]), "
                        f"got a {type(section).__name__}; ignoring the file")
        return {}
    return settings_of(section, path, file_keys, not_in_files, say)


def from_pyproject(path: str, configuration: "Any", not_in_files: "Sequence[str]",
                   trusted: "Callable[[], bool]", path_variables: "Callable[[], List[str]]",
                   say: "Callable[[str], None]") -> "Dict[str, str]":
    """Settings of ``[tool.lazypatch]`` in the pyproject.toml at ``path``: those a project
    file nobody named may not set left out unless ``trusted()`` says it is trusted."""
    data = load_toml(path, "pyproject.toml", say)
    if data is None:
        return {}
    tool = data.get("tool")
    section = tool.get("lazypatch") if isinstance(tool, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        say(f"lazypatch: {path}: tool.lazypatch must be a table ({PYPROJECT_TABLE} "
                        f"with lines such as disable = [\"name\"]); ignoring it")
        return {}
    settings = settings_of(section, path, configuration.file_keys, not_in_files, say)
    if not trusted():
        configuration.untrusted_project = path
        settings = _untrusted_project_settings(settings, path, path_variables(), say)
    return settings


def _untrusted_project_settings(settings: "Dict[str, str]", path: str,
                                path_variables: "List[str]", say: "Callable[[str], None]"
                                ) -> "Dict[str, str]":
    """``settings`` of a project file nobody named, without what only a named file may
    set; each refusal said, with the way to trust the file. A path setting (every
    variable whose meaning says "path" or "directory") must stay inside the project;
    one that a pack declares later is checked when the pack reads it (``setting``)."""
    kept: "Dict[str, str]" = {}
    for variable, value in settings.items():
        what = PROJECT_FILE_REFUSED.get(variable) or \
            outside_project(variable, value, path, path_variables)
        if what:
            say(refusal(path, variable, what))
            continue
        kept[variable] = value
    return kept


def outside_project(variable: str, value: str, path: str, path_variables: "List[str]") -> str:
    """Why a project file's path setting is refused ("" when it is not one, or stays
    inside the project)."""
    project = os.path.dirname(path)
    if variable in path_variables and value.strip() and not _inside(project, value.strip()):
        return f"writes outside {project}"
    return ""


def refusal(path: str, variable: str, what: str) -> str:
    """The message refusing ``variable`` of the project file at ``path``, and how to trust it."""
    return (f"lazypatch: {path} sets {variable[len('LAZYPATCH_'):].lower()}, which "
            f"{what}; a project file found in the current directory may not (nobody "
            f"named it). Ignored: name the file with LAZYPATCH_CONFIG or --config, or "
            f"set LAZYPATCH_TRUST_PROJECT_CONFIG=1 to trust it")


def _inside(directory: str, value: str) -> bool:
    """Whether path ``value`` (relative to ``directory``) stays inside ``directory``."""
    target = os.path.realpath(os.path.join(directory, os.path.expanduser(value)))
    root = os.path.realpath(directory)
    return target == root or target.startswith(root + os.sep)
