"""What the training utilities are asked to do: brake step and profiling settings.

Standard library only: this is read when the pack is imported during
activation if LAZYPATCH_BRAKE_STEP or LAZYPATCH_PROFILE is set, else when first used
(``brake_at``, ``profile_to``, the step hooks). The variables are declared in the pack's
``__init__.py``. Values come from the environment (or the LAZYPATCH_CONFIG file,
through ``lazypatch.setting``) and from the API calls ``brake_at`` and
``profile_to``. A bad value warns (``lazypatch.ConfigurationWarning``) and
leaves the feature off: configuration must never break the user's program.
"""

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

LEVELS = (0, 1, 2)


class ProfileSettings:
    """Where and how to profile; the schedule is torch.profiler.schedule's."""

    def __init__(self, path: str, level: int = 0, skip_first: int = 20, wait: int = 1,
                 warmup: int = 1, active: int = 1, repeat: int = 1) -> None:
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"profile path must be a directory name, got {path!r}")
        if level not in LEVELS:
            raise ValueError(f"profile level must be one of {LEVELS}, got {level!r}")
        for label, value, minimum in (("skip_first", skip_first, 0), ("wait", wait, 0),
                                      ("warmup", warmup, 0), ("active", active, 1),
                                      ("repeat", repeat, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"profile {label} must be an integer >= {minimum}, got {value!r}")
        self.path = path
        self.level = level
        self.skip_first = skip_first
        self.wait = wait
        self.warmup = warmup
        self.active = active
        self.repeat = repeat

    @property
    def last_step(self) -> "Optional[int]":
        """How many profiler steps the schedule needs, or None when it repeats forever."""
        if self.repeat == 0:
            return None
        return self.skip_first + self.repeat * (self.wait + self.warmup + self.active)

    def __repr__(self) -> str:
        return (f"ProfileSettings(path={self.path!r}, level={self.level}, "
                f"skip_first={self.skip_first}, wait={self.wait}, warmup={self.warmup}, "
                f"active={self.active}, repeat={self.repeat})")


class TrainingState:
    """The requested brake step and profile, shared by the pack and its hooks."""

    def __init__(self) -> None:
        self.brake_step: "Optional[int]" = None
        self.brake_source = ""
        self.profile: "Optional[ProfileSettings]" = None

    def active(self) -> bool:
        return self.brake_step is not None or self.profile is not None


STATE = TrainingState()


def check_step(step: object) -> int:
    """A brake step must be a positive integer; raise ValueError naming the fix otherwise."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ValueError(f"brake step must be a positive integer (stop after that many "
                         f"steps), got {step!r}")
    return step


def _integer_setting(variable: str, default: int, minimum: int) -> int:
    text = lazypatch.setting(variable).strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        lazypatch.warn_configuration(
            f"lazypatch: {variable}={text!r} is not an integer >= {minimum}; using {default}")
        return default
    return value


def load_from_environment() -> None:
    """Fill ``STATE`` from LAZYPATCH_BRAKE_STEP and LAZYPATCH_PROFILE*; warn on bad values."""
    brake_text = lazypatch.setting("LAZYPATCH_BRAKE_STEP").strip()
    if brake_text:
        try:
            STATE.brake_step = check_step(int(brake_text))
            STATE.brake_source = f"LAZYPATCH_BRAKE_STEP={brake_text}"
        except ValueError:
            lazypatch.warn_configuration(
                f"lazypatch: LAZYPATCH_BRAKE_STEP={brake_text!r} is not a positive integer "
                f"(the step after which training stops); the brake stays off")
    path = lazypatch.setting("LAZYPATCH_PROFILE").strip()
    if path:
        level = _integer_setting("LAZYPATCH_PROFILE_LEVEL", 0, 0)
        if level not in LEVELS:
            lazypatch.warn_configuration(
                f"lazypatch: LAZYPATCH_PROFILE_LEVEL={level} is not one of {LEVELS}; using 0")
            level = 0
        STATE.profile = ProfileSettings(
            path, level,
            skip_first=_integer_setting("LAZYPATCH_PROFILE_SKIP", 20, 0),
            wait=_integer_setting("LAZYPATCH_PROFILE_WAIT", 1, 0),
            warmup=_integer_setting("LAZYPATCH_PROFILE_WARMUP", 1, 0),
            active=_integer_setting("LAZYPATCH_PROFILE_ACTIVE", 1, 1),
            repeat=_integer_setting("LAZYPATCH_PROFILE_REPEAT", 1, 0))


def _flag(variable: str) -> bool:
    return lazypatch.setting(variable).strip().lower() in ("1", "true", "yes", "on")


def trace_always() -> bool:
    """Whether LAZYPATCH_TRACE_ALWAYS asks for ranges without a recording profiler."""
    return _flag("LAZYPATCH_TRACE_ALWAYS")


def tracker_backward() -> bool:
    """Whether LAZYPATCH_TRACKER_BACKWARD asks the tracker pack to track backward too."""
    return _flag("LAZYPATCH_TRACKER_BACKWARD")


def call_sites() -> bool:
    """Whether LAZYPATCH_TRACE_CALL_SITES asks for the model's call sites."""
    return _flag("LAZYPATCH_TRACE_CALL_SITES")
