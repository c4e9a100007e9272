"""Migration paths from DrivingSDK's patcher onto lazypatch. Public modules:

``lazypatch.driving_sdk.mx_driving``: the DrivingSDK 1.0 one-click patcher's API
(``Patch``, ``Patcher``, ``PatcherBuilder``, ``default_patcher_builder``),
so that porting a ``patch.py`` means changing its import line;
``lazypatch.driving_sdk.v2.patcher``: the 2.0 API (``Patcher``, ``Patch``,
``AtomicPatch``, ``RegistryPatch``, ``replace_with``).
``package/`` is lazypatch's ``mx_driving.patcher`` itself (``lazypatch.driving_sdk_patcher()``
says where), which the ``driving_sdk_api`` pack offers where DrivingSDK is not installed.
"""
