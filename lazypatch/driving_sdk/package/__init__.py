"""``mx_driving`` as lazypatch provides it where DrivingSDK is not installed: a package
holding only ``patcher`` (this folder is its ``__path__``; see ``patcher/__init__.py``).

DrivingSDK's compiled operators (``mx_driving.ops`` and the rest) are not lazypatch's
to provide: importing them fails as it would without lazypatch.
"""
