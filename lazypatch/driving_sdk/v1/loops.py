"""DrivingSDK 1.0's profiling and brake functions for the training loops.

``epoch_runner(mmcv, options)``, ``iter_runner(mmcv, options)`` (mmcv 1.x's
``EpochBasedRunner.train`` / ``IterBasedRunner.run``) and ``epoch_train_loop(mmengine,
options)``, ``iter_train_loop(mmengine, options)`` (mmengine's ``EpochBasedTrainLoop.run_epoch``
/ ``IterBasedTrainLoop.run``) take DrivingSDK 1.0's options: ``enable_profiler`` with
``profiling_path``, ``profiling_level`` (0-2) and ``step_ctrl`` = (wait, warmup, active,
repeat, skip_first), and ``enable_brake`` with ``brake_step``.

Given the imported module, they turn on lazypatch's training pack (``profile_to``,
``brake_at``), which hooks the loops instead of replacing them. Given another module
object (a stand-in, a test double), the change is made on that object at once, as 1.0
did: its loop method becomes a loop written here with the upstream loop's steps, the
whole run inside torch_npu's profiler (``torch_npu.profiler.profile`` with the level's
activities, ``schedule(wait, warmup, active, repeat, skip_first)`` and a TensorBoard
trace handler writing to the path), the profiler stepped after each iteration, and the
process ended (``sys.exit(0)``) once the iteration count reaches ``brake_step`` (from
there on, so a run resumed past it stops too).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

#: DrivingSDK's default schedule: (wait, warmup, active, repeat, skip_first).
DEFAULT_STEP_CONTROL = (1, 1, 1, 1, 20)


def _parse_profiler_options(options: Dict[str, Any]) -> Tuple[str, int, List[Any], Any,
                                                              Tuple[int, ...]]:
    """(path, level, torch_npu activities, torch_npu profiler level, step control) of
    DrivingSDK 1.0's profiling options: level 0 records the NPU at ``Level0``, levels 1
    and 2 the NPU and the CPU at ``Level1``. ValueError for a level outside 0-2."""
    import torch_npu
    path, level = options["profiling_path"], options["profiling_level"]
    if not isinstance(level, int) or not 0 <= level <= 2:
        raise ValueError(f"valid profiling levels are integers within range [0, 2], "
                         f"got {level!r}")
    profiler = torch_npu.profiler
    activities = [profiler.ProfilerActivity.NPU] + \
        ([profiler.ProfilerActivity.CPU] if level else [])
    profiler_level = profiler.ProfilerLevel.Level1 if level else profiler.ProfilerLevel.Level0
    step_control = tuple(options.get("step_ctrl", DEFAULT_STEP_CONTROL))
    return path, level, activities, profiler_level, step_control


class LoopControl:
    """The profiler and the brake of one 1.0 loop function's options."""

    def __init__(self, options: Dict[str, Any]) -> None:
        self.profiling = _parse_profiler_options(options) \
            if options.get("enable_profiler") else None
        self.brake_step: Optional[int] = options["brake_step"] \
            if options.get("enable_brake") else None

    @contextlib.contextmanager
    def running(self) -> Iterator[Callable[[Any], None]]:
        """Around a loop: a function to call after each iteration with the iteration count."""
        if self.profiling is None:
            yield self.brake
            return
        import torch_npu
        profiler = torch_npu.profiler
        path, level, activities, profiler_level, (wait, warmup, active, repeat,
                                                  skip_first) = self.profiling
        with profiler.profile(
                activities=activities, with_stack=level == 2, record_shapes=level > 0,
                profile_memory=level == 2,
                # By keyword: torch_npu's schedule takes (wait, active, warmup, ...) in
                # that order, so DrivingSDK's positional call swaps warmup and active.
                schedule=profiler.schedule(wait=wait, warmup=warmup, active=active,
                                           repeat=repeat, skip_first=skip_first),
                experimental_config=profiler._ExperimentalConfig(profiler_level=profiler_level),
                on_trace_ready=profiler.tensorboard_trace_handler(path)) as session:
            def step(iterations: Any) -> None:
                session.step()
                self.brake(iterations)
            yield step

    def brake(self, iterations: Any) -> None:
        if self.brake_step is not None and iterations >= self.brake_step:
            sys.exit(0)


def _replace_on(owner: Any, method: str, loop: Callable[..., Any], where: str) -> None:
    if not hasattr(owner, method):
        raise AttributeError(f"{where}.{method} not found")
    setattr(owner, method, loop)


# -- the loops, for a given module object -------------------------------------------------

def epoch_runner_train(control: LoopControl) -> Callable[..., None]:
    """mmcv 1.x ``EpochBasedRunner.train``: one epoch over ``data_loader``."""
    def train(self: Any, data_loader: Any, **kwargs: Any) -> None:
        self.model.train()
        self.mode = "train"
        self.data_loader = data_loader
        self._max_iters = self._max_epochs * len(data_loader)
        self.call_hook("before_train_epoch")
        time.sleep(2)   # as mmcv: lets the data loader's workers settle between epochs
        with control.running() as finished:
            for index, data_batch in enumerate(data_loader):
                self.data_batch = data_batch
                self._inner_iter = index
                self.call_hook("before_train_iter")
                self.run_iter(data_batch, train_mode=True, **kwargs)
                self.call_hook("after_train_iter")
                del self.data_batch
                self._iter += 1
                finished(self._iter)
        self.call_hook("after_train_epoch")
        self._epoch += 1
    return train


def iter_runner_run(control: LoopControl, iter_loader: Any) -> Callable[..., None]:
    """mmcv 1.x ``IterBasedRunner.run``: the workflow's phases in turn until
    ``max_iters`` training iterations."""
    def run(self: Any, data_loaders: List[Any], workflow: List[Tuple[str, int]],
            max_iters: Optional[int] = None, **kwargs: Any) -> None:
        assert isinstance(data_loaders, list) and len(data_loaders) == len(workflow)
        if max_iters is not None:
            warnings.warn("setting max_iters in run is deprecated, please set max_iters in "
                          "runner_config", DeprecationWarning, stacklevel=2)
            self._max_iters = max_iters
        self.logger.info("workflow: %s, max: %d iters", workflow, self._max_iters)
        self.call_hook("before_run")
        loaders = [iter_loader(data_loader) for data_loader in data_loaders]
        self.call_hook("before_epoch")
        with control.running() as finished:
            while self.iter < self._max_iters:
                for loader, (mode, iterations) in zip(loaders, workflow):
                    self._inner_iter = 0
                    if not isinstance(mode, str) or not hasattr(self, mode):
                        raise ValueError(f'runner has no method named "{mode}" to run a '
                                         f'workflow')
                    phase = getattr(self, mode)
                    for _ in range(iterations):
                        if mode == "train" and self.iter >= self._max_iters:
                            break
                        phase(loader, **kwargs)
                        finished(self.iter)
        time.sleep(1)   # as mmcv: lets hooks such as loggers finish
        self.call_hook("after_epoch")
        self.call_hook("after_run")
    return run


def epoch_train_loop_run_epoch(control: LoopControl) -> Callable[[Any], None]:
    """mmengine ``EpochBasedTrainLoop.run_epoch``: one epoch over ``self.dataloader``."""
    def run_epoch(self: Any) -> None:
        self.runner.call_hook("before_train_epoch")
        self.runner.model.train()
        with control.running() as finished:
            for index, data_batch in enumerate(self.dataloader):
                self.run_iter(index, data_batch)
                finished(self._iter)
        self.runner.call_hook("after_train_epoch")
        self._epoch += 1
    return run_epoch


def iter_train_loop_run(control: LoopControl, print_log: Any) -> Callable[[Any], Any]:
    """mmengine ``IterBasedTrainLoop.run``: iterations until ``max_iters`` (or a stop),
    validating every ``val_interval`` from ``val_begin``; a resumed loop first skips the
    batches already trained."""
    def run(self: Any) -> Any:
        self.runner.call_hook("before_train")
        self.runner.call_hook("before_train_epoch")
        if self._iter > 0:
            print_log(f"Advance dataloader {self._iter} steps to skip data that has already "
                      f"been trained", logger="current", level=logging.WARNING)
            for _ in range(self._iter):
                next(self.dataloader_iterator)
        with control.running() as finished:
            while self._iter < self._max_iters and not self.stop_training:
                self.runner.model.train()
                self.run_iter(next(self.dataloader_iterator))
                finished(self._iter)
                self._decide_current_val_interval()
                if self.runner.val_loop is not None and self._iter >= self.val_begin and (
                        self._iter % self.val_interval == 0 or self._iter == self._max_iters):
                    self.runner.val_loop.run()
        self.runner.call_hook("after_train_epoch")
        self.runner.call_hook("after_train")
        return self.runner.model
    return run


# -- the 1.0 functions ------------------------------------------------------------------

def _on_imported(module: Any, options: Dict[str, Any]) -> bool:
    """Turn on the training pack's profiling and brake when ``module`` is the imported
    one (the pack hooks its loops); whether it was."""
    name = getattr(module, "__name__", "")
    if sys.modules.get(name) is not module:
        return False
    from ..v2.builtin_patches import training_loop_patch
    training_loop_patch(name, options).func(module, options)
    return True


def epoch_runner(mmcv: Any, options: Dict[str, Any]) -> None:
    """Profiling and brake in mmcv 1.x's ``EpochBasedRunner.train``."""
    if not _on_imported(mmcv, options):
        _replace_on(mmcv.runner.EpochBasedRunner, "train",
                    epoch_runner_train(LoopControl(options)), "mmcv.runner.EpochBasedRunner")


def iter_runner(mmcv: Any, options: Dict[str, Any]) -> None:
    """Profiling and brake in mmcv 1.x's ``IterBasedRunner.run``."""
    if not _on_imported(mmcv, options):
        control = LoopControl(options)
        _replace_on(mmcv.runner.IterBasedRunner, "run",
                    iter_runner_run(control, mmcv.runner.iter_based_runner.IterLoader),
                    "mmcv.runner.IterBasedRunner")


def epoch_train_loop(mmengine: Any, options: Dict[str, Any]) -> None:
    """Profiling and brake in mmengine's ``EpochBasedTrainLoop.run_epoch``."""
    if not _on_imported(mmengine, options):
        _replace_on(mmengine.runner.EpochBasedTrainLoop, "run_epoch",
                    epoch_train_loop_run_epoch(LoopControl(options)),
                    "mmengine.runner.EpochBasedTrainLoop")


def iter_train_loop(mmengine: Any, options: Dict[str, Any]) -> None:
    """Profiling and brake in mmengine's ``IterBasedTrainLoop.run``."""
    if not _on_imported(mmengine, options):
        control = LoopControl(options)
        _replace_on(mmengine.runner.IterBasedTrainLoop, "run",
                    iter_train_loop_run(control, mmengine.logging.print_log),
                    "mmengine.runner.IterBasedTrainLoop")
