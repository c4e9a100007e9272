"""``mx_driving.patcher.mmengine_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v1.loops import (
    _parse_profiler_options,
    epoch_runner,
    epoch_train_loop,
    iter_runner,
    iter_train_loop,
)
from lazypatch.driving_sdk.v2.builtin_groups import OptimizerWrapper
from lazypatch.driving_sdk.v2.builtin_patches import (
    build_mmengine_epoch_train_loop_patch,
    build_mmengine_iter_train_loop_patch,
    ddp,
    optimizer_hooks,
    optimizer_wrapper,
    stream,
)

__all__ = ["build_mmengine_epoch_train_loop_patch", "build_mmengine_iter_train_loop_patch",
           "OptimizerWrapper", "ddp", "optimizer_hooks", "optimizer_wrapper", "stream",
           "epoch_runner", "iter_runner", "epoch_train_loop", "iter_train_loop",
           "_parse_profiler_options"]
