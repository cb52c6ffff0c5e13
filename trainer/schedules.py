"""γ schedules for the mixed loss γ·L_RL + (1−γ)·L_MLE, evaluated per optimizer step."""
from __future__ import annotations


class Constant:
    """A fixed γ (Paulus et al. 0.9984; Scialom et al. 0.5)."""

    def __init__(self, value: float):
        _check_unit("value", value)
        self.value = value

    def __call__(self, step: int) -> float:
        return self.value


class LinearRamp:
    """γ moves linearly from `start` to `end` over `steps` optimizer steps, then stays at `end`."""

    def __init__(self, start: float, end: float, steps: int):
        _check_unit("start", start)
        _check_unit("end", end)
        if steps < 1:
            raise ValueError(f"gamma.steps must be >= 1, got {steps}")
        self.start, self.end, self.steps = start, end, steps

    def __call__(self, step: int) -> float:
        return self.start + (self.end - self.start) * min(step, self.steps) / self.steps


class IncreasingFrom:
    """Clark et al.: start at γ0 = 0.97 and increase, γ_t = 1 − (1 − γ0)·decay^t, capped at `cap`."""

    def __init__(self, start: float = 0.97, decay: float = 0.9999, cap: float = 0.9984):
        _check_unit("start", start)
        _check_unit("cap", cap)
        if not 0 < decay <= 1:
            raise ValueError(f"gamma.decay must be in (0, 1], got {decay}")
        self.start, self.decay, self.cap = start, decay, cap

    def __call__(self, step: int) -> float:
        return min(1 - (1 - self.start) * self.decay ** step, self.cap)


def _check_unit(name: str, value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"gamma.{name} must be in [0, 1], got {value}")
