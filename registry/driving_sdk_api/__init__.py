"""``import mx_driving.patcher`` for code written against DrivingSDK's patcher.

Every DrivingSDK migration file starts with ``from mx_driving.patcher import ...``.
Where DrivingSDK is not installed, that import gets lazypatch's implementation
of the patcher's API (``lazypatch.driving_sdk.package``): an ``mx_driving``
stand-in whose only submodule is ``patcher``. Nothing is imported until the
program imports ``mx_driving``; where DrivingSDK is installed, its package is
imported and this patch reports ``skipped`` (the real one is in charge), unless
``LAZYPATCH_DRIVING_SDK=lazypatch`` replaces its ``mx_driving.patcher`` with lazypatch's
(DrivingSDK's operators stay in use). An installed ``mx_driving`` without a ``patcher``
subpackage (DrivingSDK's operators built without it) gets lazypatch's beside its own
modules, with no setting: ``import mx_driving.patcher`` would fail otherwise.
"""

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "driving_sdk_api"
TAGS = (PACK,)
OPT_IN = False
TARGETS = ("mx_driving",)
REQUIRES = ()

import lazypatch

# lazypatch's mx_driving.patcher: its import name, and the folder holding it (a path,
# not an import: nothing is imported until the program imports mx_driving).
_PATCHER = lazypatch.driving_sdk_patcher()
PATCHER_MODULE, PATCHER_PACKAGE_DIRECTORY = _PATCHER["module"], _PATCHER["directory"]

VARIABLE = "LAZYPATCH_DRIVING_SDK"
lazypatch.declare_variable(
    VARIABLE, "which mx_driving.patcher code written for DrivingSDK gets: 'auto' (DrivingSDK's "
              "where it is installed, else lazypatch's) or 'lazypatch' (lazypatch's always)")

PATCH_NAME = "driving_sdk_api.mx_driving_patcher"

_choice = lazypatch.setting(VARIABLE, "auto").strip().lower() or "auto"
if _choice not in ("auto", "lazypatch"):
    lazypatch.warn_configuration(
        f"lazypatch: {VARIABLE}={_choice!r} is not 'auto' or 'lazypatch'; using 'auto'")
    _choice = "auto"

if _choice == "lazypatch":
    # Only the patcher is replaced: the installed DrivingSDK's operators stay its own.
    lazypatch.replace_module("mx_driving.patcher", PATCHER_MODULE,
                             name=PATCH_NAME, tags=("driving_sdk_api",))
else:
    # __file__ is what `from mx_driving import npu_x` names when the operator is missing:
    # the interpreter's own ImportError, which an attribute hook cannot word.
    lazypatch.stand_in("mx_driving", {
        "__path__": [PATCHER_PACKAGE_DIRECTORY],
        "__file__": "<lazypatch's mx_driving, DrivingSDK is not installed: it holds only "
                    "`patcher`; DrivingSDK's operators come with the npu_stand_in pack "
                    "(lazypatch run --enable npu_stand_in)>"},
        name=PATCH_NAME, tags=("driving_sdk_api",))

    @lazypatch.when_imported("mx_driving", name=PATCH_NAME + "_beside_operators",
                             tags=("driving_sdk_api",))
    def patcher_beside_operators(module, patch):
        """Where the installed mx_driving has no ``patcher``, its ``__path__`` also
        lists the folder of lazypatch's, so ``import mx_driving.patcher`` finds that."""
        from importlib.machinery import PathFinder
        path = list(getattr(module, "__path__", None) or [])
        if PATCHER_PACKAGE_DIRECTORY in path:
            patch.skip("mx_driving is lazypatch's stand-in, which holds the patcher")
        if not path:
            patch.skip("mx_driving is not a package: nothing can be imported below it")
        # Asked of the path finder with the package's own folders: nothing is imported.
        if PathFinder.find_spec("mx_driving.patcher", path) is not None:
            patch.skip("the installed mx_driving has its own patcher, which code written for "
                       "DrivingSDK gets (LAZYPATCH_DRIVING_SDK=lazypatch gives lazypatch's)")
        patch.setattr(module, "__path__", path + [PATCHER_PACKAGE_DIRECTORY])
