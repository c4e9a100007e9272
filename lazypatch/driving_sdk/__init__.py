"""Migration paths from other patching systems onto lazypatch.

``lazypatch.driving_sdk.mx_driving``: the DrivingSDK one-click patcher's API
(``Patch``, ``Patcher``, ``PatcherBuilder``, ``default_patcher_builder``),
so that porting a ``patch.py`` means changing its import line.
"""
