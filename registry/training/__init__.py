"""The training pack: early stop ("brake"), step-driven profiling, tracing markers.

Off unless asked for. ``LAZYPATCH_BRAKE_STEP=N`` stops a training run
cleanly after optimizer step N (any PyTorch loop) or iteration N (mmengine's
epoch- and iteration-based loops), with exit code 0, after flushing the
profiler and the LAZYPATCH_REPORT file. ``LAZYPATCH_PROFILE=DIR`` (with
``LAZYPATCH_PROFILE_LEVEL`` and the schedule variables) profiles steps with
``torch.profiler``. The API calls ``brake_at(step)`` and ``profile_to(dir)``
do the same from code. ``training.tracing`` (tag ``tracing``, enable it by
name) marks every torch operator and module forward with a range naming the
module path, operator and shapes while a profiler records, and every
backward operator with the module whose forward produced it.
``training.tracker`` (tag ``tracker``) keeps ``module_tracker()`` tracking for
the whole run: the modules executing now (``parents``), ``is_bw`` and user
hooks, ModTracker's interface; forward only unless backward is asked for
(LAZYPATCH_TRACKER_BACKWARD=1, or user backward hooks);
``with module_tracker() as tracker:`` tracks forward and backward in a block
without enabling the patch. LAZYPATCH_TRACE_CALL_SITES=1 adds the file:line
that called into the model to the tracker, the tracing ranges and the
per-module table.

Importing this pack only declares patches: no torch, no mmengine.
"""

# The pack's declarations, in the one form every pack uses (docs/writing_packs.md).
PACK = "training"
TAGS = (PACK,)
OPT_IN = False
TARGETS = ("torch", "mmengine")
REQUIRES = ()

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

#: The settings this pack reads, declared at activation (``settings.py`` reads them).
VARIABLES: "Dict[str, str]" = {
    "LAZYPATCH_BRAKE_STEP": "stop training cleanly (exit code 0) after this optimizer step "
                            "or mmengine iteration",
    "LAZYPATCH_PROFILE": "directory for a torch.profiler trace of the training steps",
    "LAZYPATCH_PROFILE_LEVEL": "0: device activity only, 1: + CPU and shapes, "
                               "2: + stacks and memory (default 0)",
    "LAZYPATCH_PROFILE_SKIP": "profiler schedule: steps skipped before the first cycle (default 20)",
    "LAZYPATCH_PROFILE_WAIT": "profiler schedule: idle steps per cycle (default 1)",
    "LAZYPATCH_PROFILE_WARMUP": "profiler schedule: warm-up steps per cycle (default 1)",
    "LAZYPATCH_PROFILE_ACTIVE": "profiler schedule: recorded steps per cycle (default 1)",
    "LAZYPATCH_PROFILE_REPEAT": "profiler schedule: number of cycles, 0 for unlimited (default 1)",
    "LAZYPATCH_TRACE_ALWAYS": "1: the tracing pack emits its ranges even when no torch profiler "
                              "is recording (for nsys without emit_nvtx)",
    "LAZYPATCH_TRACKER_BACKWARD": "1: the training.tracker patch also tracks backward (parents "
                                  "during backward); off, it tracks forward only, which is "
                                  "cheaper",
    "LAZYPATCH_TRACE_CALL_SITES": "1: the module tracker records the file:line that called into "
                                  "the model (outermost module call), shown in tracing ranges "
                                  "and the per-module table",
}

for _variable, _meaning in VARIABLES.items():
    lazypatch.declare_variable(_variable, _meaning)

STEP_PATCHES = ("training.optimizer_steps", "training.mmengine_iterations")
# settings.py is loaded (and the values parsed, a bad one warned about) at activation only
# when a brake or a profile is asked for: otherwise nothing is on, and every process
# saves loading it (benchmarks/COSTS.md). It is loaded when first used then.
if lazypatch.setting("LAZYPATCH_BRAKE_STEP").strip() or \
        lazypatch.setting("LAZYPATCH_PROFILE").strip():
    from . import settings as _settings
    _settings.load_from_environment()
    _ON = _settings.STATE.active()
else:
    _ON = False


@lazypatch.when_imported("torch.optim.optimizer", name=f"{PACK}.optimizer_steps",
                         tags=(PACK, "brake", "profile"), enabled=_ON)
def optimizer_steps(module, patch):
    """Count optimizer steps of any PyTorch loop (global step post-hook) for brake/profiling."""
    from .steps import hook_optimizers
    hook_optimizers(module, patch)


@lazypatch.when_imported("mmengine.runner.loops", name=f"{PACK}.mmengine_iterations",
                         tags=(PACK, "brake", "profile"), enabled=_ON)
def mmengine_iterations(module, patch):
    """Count mmengine train-loop iterations (wrapped run_iter) for brake/profiling."""
    from .steps import hook_mmengine_loops
    hook_mmengine_loops(module, patch)


@lazypatch.when_imported("torch", name=f"{PACK}.tracing", tags=(PACK, "tracing"),
                         enabled=False)
def tracing(module, patch):
    """Mark torch operators and module forwards with ranges (module path, op, shapes)."""
    from .tracing import install
    install(module, patch)


@lazypatch.when_imported("torch", name=f"{PACK}.tracker", tags=(PACK, "tracker"),
                         enabled=False)
def module_tracking(module, patch):
    """Track the modules executing now, forward (and backward with
    LAZYPATCH_TRACKER_BACKWARD=1): module_tracker()."""
    from . import settings
    from .tracker import install
    install(module, patch, backward=settings.tracker_backward())


def module_tracker() -> "Any":
    """The process's module tracker (``tracker.ModuleTracker``); needs torch imported.

    It tracks while the ``training.tracker`` or ``training.tracing`` patch is
    applied, or inside ``with module_tracker():`` (forward and backward there).
    """
    import torch

    from .tracker import tracker_for
    return tracker_for(torch)


def _switch_step_counting() -> "List[str]":
    """Enable the step sources when a feature is on (applying them to imported targets)."""
    from .settings import STATE
    if STATE.active():
        enabled = lazypatch.enable(*STEP_PATCHES)
        from sys import modules
        steps = modules.get(f"{__name__}.steps")
        if steps is not None:   # already counting: add the newly requested listener
            steps.attach_listeners()
        return enabled
    return []


def brake_at(step: "Optional[int]") -> None:
    """Stop training cleanly (exit code 0) once step ``step`` has finished; None turns it off.

    The step is the optimizer step of a plain PyTorch loop or the iteration
    of an mmengine train loop; a run resumed past it stops at its next step.
    """
    from .settings import STATE, check_step
    STATE.brake_step = None if step is None else check_step(step)
    STATE.brake_source = "" if step is None else f"brake_at({step})"
    _switch_step_counting()


def profile_to(path: "Optional[str]", level: int = 0, *, skip_first: int = 20, wait: int = 1,
               warmup: int = 1, active: int = 1, repeat: int = 1) -> None:
    """Profile training steps into directory ``path`` (None turns profiling off).

    ``level`` 0 records device activity only (CPU activity where no
    accelerator is usable), 1 adds CPU activity and shapes, 2 adds stacks
    and memory. The schedule is ``torch.profiler.schedule``'s.
    """
    from .settings import STATE, ProfileSettings
    if path is None:
        from sys import modules
        profiling = modules.get(f"{__name__}.profiling")
        clock = modules.get(f"{__name__}.clock")
        if profiling is not None and clock is not None:
            for profiler in list(profiling._PROFILERS.values()):
                profiler.close()
                clock.CLOCK.remove_listener(profiler)
        STATE.profile = None
        return
    STATE.profile = ProfileSettings(
        path, level, skip_first=skip_first, wait=wait, warmup=warmup, active=active,
        repeat=repeat)
    _switch_step_counting()


__all__ = ["brake_at", "profile_to", "module_tracker", "STEP_PATCHES"]
