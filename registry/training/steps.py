"""One step counter for the brake and the profiler, fed by the training loop itself.

Two sources, neither copying a loop:

* any PyTorch loop: a global optimizer step post-hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``). The step
  number is the optimizer's own count where it keeps one (Adam-style
  ``state["step"]``, restored by ``load_state_dict``), so a resumed run
  continues from its checkpoint's step; otherwise the calls seen here.
* mmengine's ``EpochBasedTrainLoop`` and ``IterBasedTrainLoop``: their
  ``run_iter`` is wrapped (``patch.wrap``), and the step is the loop's own
  ``iter`` counter after the iteration, which a resumed run restores.
  Optimizer steps inside an mmengine iteration are not counted twice.

Listeners (the brake, the profiler) get ``step_starting()`` before an
iteration where the loop tells us, and ``step_finished(step, what)`` after;
the counter itself is ``clock.CLOCK``.
"""

from __future__ import annotations

from .clock import CLOCK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def attach_listeners() -> None:
    """Add the brake and the profiler as the settings ask (idempotent)."""
    from .settings import STATE
    if STATE.profile is not None:
        from .profiling import profiler_for
        CLOCK.add_listener(profiler_for(STATE.profile))
    if STATE.brake_step is not None:
        from .brake import BRAKE
        CLOCK.add_listener(BRAKE)


def hook_optimizers(optimizer_module: "Any", patch: "Any") -> None:
    """Install the global optimizer post-hook, recorded in the patch ledger."""
    attach_listeners()
    hook = CLOCK.optimizer_stepped
    handle = optimizer_module.register_optimizer_step_post_hook(hook)
    record_hook(handle, hook, patch)


def record_hook(handle: "Any", hook: "Any", patch: "Any") -> None:
    """Move a hook registered through torch's public API into the patch ledger.

    torch allocates the key (``handle.id``) and tells which dict holds it;
    re-adding it through ``patch.setitem`` makes undo delete exactly that entry.
    """
    hooks = handle.hooks_dict_ref()
    del hooks[handle.id]
    patch.setitem(hooks, handle.id, hook)


def hook_mmengine_loops(loops_module: "Any", patch: "Any") -> None:
    """Wrap ``run_iter`` of mmengine's epoch- and iteration-based train loops."""
    attach_listeners()
    for name in ("EpochBasedTrainLoop", "IterBasedTrainLoop"):
        loop_class = getattr(loops_module, name, None)
        if loop_class is not None:
            patch.wrap(loop_class, "run_iter", CLOCK.loop_iteration)
