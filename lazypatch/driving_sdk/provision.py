"""What importing lazypatch's ``mx_driving.patcher`` turns on beyond names.

DrivingSDK's ``import mx_driving.patcher`` imports ``torch_npu`` and its
``transfer_to_npu``, so CUDA-written code runs on the NPU from that line on.
lazypatch's device pack does that work lazily and undoably; on a host where
``torch_npu`` is importable, importing the patcher turns it on. Elsewhere
nothing happens: a CPU host keeps CUDA calls as they are unless the user names
the device pack.
"""

from __future__ import annotations


def npu_host() -> bool:
    """Whether torch_npu is importable here (found, not imported)."""
    from importlib.util import find_spec
    try:
        return find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return False


def turn_on_npu_device_handling() -> "list":
    """On an Ascend host, enable the device pack (CUDA calls go to the NPU); the names of
    the patches it enabled (none elsewhere, or when it is already on)."""
    if not npu_host():
        return []
    from ..apply import application
    from ..decide.selection import load_opt_in_packs
    from ..registry import load_packs
    from ..state import STATE
    try:
        load_packs()   # declared already where lazypatch was activated; else now
        load_opt_in_packs(("device",))
        already = {name for name, patch in STATE.catalog.by_name.items()
                   if name.startswith("device.") and patch.enabled}
        enabled = application.enable(("device",))
    except Exception as error:   # the patcher's import must not fail over it
        from ..errors import ConfigurationWarning
        from ..notices import notify
        notify(f"lazypatch: importing mx_driving.patcher on an Ascend host could not turn on "
               f"the device pack ({type(error).__name__}: {error}); CUDA calls are not sent "
               f"to the NPU. Try LAZYPATCH_ENABLE=device", ConfigurationWarning)
        return []
    return [name for name in enabled if name not in already]

__all__ = ["npu_host", "turn_on_npu_device_handling"]
