"""Ray: the same patches in every worker of a Ray job, tasks and actors alike.

Ray workers are started by the raylet of their node, not by the driver, so
they inherit none of the driver's environment, and ``lazypatch run`` around
the driver never reaches them. ``runtime_env()`` returns a runtime environment
that does: the driver's settings as ``PYTHONLAZYPATCH`` in ``env_vars`` and a
``worker_process_setup_hook`` that activates lazypatch in each worker, chained
with the user's own hook (lazypatch first, then theirs)::

    import ray
    from lazypatch.integrations.ray import runtime_env
    ray.init(runtime_env=runtime_env({"pip": ["..."]}))
    SomeActor.options(runtime_env=runtime_env()).remote()
    TorchTrainer(..., run_config=RunConfig(...))   # inherits the job's runtime_env
    ray.init(runtime_env=runtime_env(patch_modules=["my_patches"]))   # shipped to workers

A worker has imported Ray and its dependencies before the hook runs: patches
of those targets apply late (with ``LatePatchWarning`` when a module global
still holds an original) and the report lists them under ``imported_before``.
``lazypatch run`` sets ``RAY_RUNTIME_ENV_HOOK`` to ``runtime_env_hook``, so a
driver run under it needs no change: every ``ray.init`` and job submission
of that process does the same (after the user's own ``RAY_RUNTIME_ENV_HOOK``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..activate.configuration import PORTABLE_VARIABLE
from . import activate_worker, driver_settings, keep_report_current

SETUP_HOOK = "lazypatch.integrations.ray.setup_worker"

Hook = Union[str, Callable[[], Any]]


def runtime_env(user_env: Optional[Mapping[str, Any]] = None, *,
                settings: Optional[str] = None,
                patch_modules: Iterable[Union[str, ModuleType]] = ()) -> Dict[str, Any]:
    """``user_env`` (a dict or ``ray.runtime_env.RuntimeEnv``; not modified) plus what
    activates lazypatch in every worker with this driver's settings.

    ``settings`` is a PYTHONLAZYPATCH value (default: the settings this process runs
    with). A ``PYTHONLAZYPATCH`` the user put in ``env_vars`` is kept. The user's
    ``worker_process_setup_hook`` (a callable or ``"module.function"``) still runs,
    after lazypatch's activation. ``patch_modules`` (packages of the user's patches,
    by name or as modules) are shipped to the workers through Ray's ``py_modules``
    and imported there at activation, as ``LAZYPATCH_MODULES`` names them.
    """
    merged: Dict[str, Any] = dict(user_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    value = driver_settings() if settings is None else settings
    if patch_modules:
        names, packages = _patch_packages(patch_modules)
        value = _with_modules(value, names)
        shipped = list(merged.get("py_modules") or [])
        merged["py_modules"] = shipped + [package for package in packages
                                          if package not in shipped]
    env_vars.setdefault(PORTABLE_VARIABLE, value)
    merged["env_vars"] = env_vars
    user_hook = merged.get("worker_process_setup_hook")
    if user_hook is None or user_hook == SETUP_HOOK or isinstance(user_hook, ChainedSetupHook):
        merged["worker_process_setup_hook"] = user_hook or SETUP_HOOK
    else:
        merged["worker_process_setup_hook"] = ChainedSetupHook(user_hook)
    return merged


def _patch_packages(patch_modules: Iterable[Union[str, ModuleType]]
                    ) -> Tuple[List[str], List[ModuleType]]:
    """(the dotted names to import in the workers, the top-level packages to ship).

    Ray's ``py_modules`` ships packages (directories), not single files: a patch
    module that is a lone ``.py`` file is refused here, with the fix, rather than
    failing in every worker.
    """
    import importlib
    import sys
    names: List[str] = []
    packages: List[ModuleType] = []
    for entry in patch_modules:
        if isinstance(entry, str):
            if not entry or entry.startswith("."):
                raise ValueError(f"patch_modules: {entry!r} is not an absolute module name "
                                 f"such as 'my_patches'")
            module = importlib.import_module(entry)
        elif isinstance(entry, ModuleType):
            module = entry
        else:
            raise TypeError(f"patch_modules: give module names or modules, got {entry!r}")
        top = sys.modules[module.__name__.partition(".")[0]]
        if not hasattr(top, "__path__") or getattr(top, "__file__", None) is None:
            what = "a single file" if not hasattr(top, "__path__") else "a namespace package"
            raise ValueError(
                f"patch_modules: {top.__name__!r} is {what}; Ray ships regular packages "
                f"only (py_modules): put it in a package directory (my_patches/__init__.py) "
                f"and name that")
        if module.__name__ not in names:
            names.append(module.__name__)
        if top not in packages:
            packages.append(top)
    return names, packages


def _with_modules(value: str, names: List[str]) -> str:
    """The PYTHONLAZYPATCH ``value`` with ``names`` added to its LAZYPATCH_MODULES."""
    from ..activate.configuration import decode_settings, encode_settings, split_list
    decoded = decode_settings(value)
    if decoded is None:
        raise ValueError(f"{PORTABLE_VARIABLE} value {value[:60]!r} is not one lazypatch "
                         f"wrote; pass settings=None to use this process's settings")
    settings = dict(decoded[1])
    modules = split_list(settings.get("LAZYPATCH_MODULES", ""))
    settings["LAZYPATCH_MODULES"] = ",".join(modules + [name for name in names
                                                        if name not in modules])
    return encode_settings(settings)


class ChainedSetupHook:
    """lazypatch's activation, then the user's hook, as one ``worker_process_setup_hook``.

    An instance of a module-level class: Ray pickles a callable hook to send it to
    the workers (a closure would be pickled by value, lazypatch's code with it), and
    names it by ``__name__`` in its messages, which ``functools.partial`` lacks.
    """

    def __init__(self, user_hook: Hook) -> None:
        self.user_hook = user_hook
        self.__name__ = "lazypatch then " + (user_hook if isinstance(user_hook, str) else
                                             getattr(user_hook, "__name__", repr(user_hook)))

    def __call__(self) -> None:
        setup_worker(self.user_hook)


# Ray's driver passes the runtime env of each ray.init and job submission through
# the function RAY_RUNTIME_ENV_HOOK names ("module.function"). `lazypatch run` names
# ours and keeps a hook the user had named in USER_HOOK_VARIABLE, which ours runs first.
RUNTIME_ENV_HOOK_VARIABLE = "RAY_RUNTIME_ENV_HOOK"
RUNTIME_ENV_HOOK = "lazypatch.integrations.ray.runtime_env_hook"
USER_HOOK_VARIABLE = "LAZYPATCH_RAY_USER_HOOK"


def install_runtime_env_hook(environment: Dict[str, str]) -> None:
    """Make every ``ray.init`` of processes started with ``environment`` add lazypatch's
    activation to its runtime env (after the user's own RAY_RUNTIME_ENV_HOOK, if any)."""
    current = environment.get(RUNTIME_ENV_HOOK_VARIABLE, "").strip()
    if current and current != RUNTIME_ENV_HOOK:
        environment[USER_HOOK_VARIABLE] = current
    environment[RUNTIME_ENV_HOOK_VARIABLE] = RUNTIME_ENV_HOOK


def runtime_env_hook(user_env: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """For ``RAY_RUNTIME_ENV_HOOK``: Ray calls it with the runtime env of every
    ``ray.init`` and job submission, and uses what it returns."""
    import os
    chained = os.environ.get(USER_HOOK_VARIABLE, "").strip()
    if chained:
        user_env = _load(chained)(user_env)
    return runtime_env(user_env)


def _load(dotted: str) -> Callable[..., Any]:
    """The function ``"module.function"`` names (Ray's form for hooks)."""
    module_name, _, function_name = dotted.rpartition(".")
    module = __import__(module_name, fromlist=[function_name])
    return getattr(module, function_name)


def setup_worker(user_hook: Optional[Hook] = None) -> None:
    """Ray's worker setup hook: activate lazypatch in this worker, then run ``user_hook``."""
    activate_worker(_worker_name(), "", "ray worker")
    keep_report_current()   # Ray kills its workers: no exit handler runs there
    if user_hook is None:
        return
    # Ray's own form, "module.function", is imported in the worker.
    hook = _load(user_hook) if isinstance(user_hook, str) else user_hook
    hook()


def _worker_name() -> str:
    """``ray-`` and the first 12 hex digits of this worker's id (``ray-<pid>`` if Ray
    cannot say yet)."""
    import os
    try:
        import ray
        return "ray-" + ray.get_runtime_context().get_worker_id()[:12]
    except Exception:   # an older Ray or a context not ready: the pid still tells workers apart
        return f"ray-{os.getpid()}"
