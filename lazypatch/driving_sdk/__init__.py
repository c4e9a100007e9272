"""Migration paths from DrivingSDK's patcher onto lazypatch. Public modules:

``lazypatch.driving_sdk.mx_driving``: the DrivingSDK 1.0 one-click patcher's API
(``Patch``, ``Patcher``, ``PatcherBuilder``, ``default_patcher_builder``),
so that porting a ``patch.py`` means changing its import line;
``lazypatch.driving_sdk.v2.patcher``: the 2.0 API (``Patcher``, ``Patch``,
``AtomicPatch``, ``RegistryPatch``, ``replace_with``);
this package itself: where lazypatch's own ``mx_driving.patcher`` package lives
(``PATCHER_MODULE``, ``PATCHER_PACKAGE_DIRECTORY``), for the ``driving_sdk_api``
pack, which offers it as ``mx_driving.patcher``. Importing this package imports
nothing else: the pack reads these names at activation.
"""

import os

# The import name of lazypatch's implementation of ``mx_driving.patcher``.
PATCHER_MODULE = "lazypatch.driving_sdk.package.patcher"
# The folder holding that ``patcher`` package: an ``mx_driving`` stand-in's
# ``__path__`` (a path, not an import: nothing is imported until the program
# imports mx_driving).
PATCHER_PACKAGE_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "package")
