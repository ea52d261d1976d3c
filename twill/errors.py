"""The exception tree of twill: every user-facing failure is one of these, with a one-line message.

The CLI prints ``str(err)`` on a single line and exits with status 2. The message shape is
``<where>: <what is wrong>; <what was expected, or how to fix it>``. Data that tests and
notebooks may want sits on attributes, so nobody needs to parse text.
"""

from __future__ import annotations


class TwillError(Exception):
    """Base class of every error twill raises on purpose."""


class GraphError(TwillError):
    """A malformed loop body: dangling edge, zero-distance cycle, negative cost, bad field."""

    def __init__(self, message: str, *, cycle: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.cycle = cycle


class ArchError(TwillError):
    """Bad or missing architecture data (a TOML field without a source, a wrong type, ...)."""


class PluginError(ArchError):
    """A broken or duplicate ``twill.archs`` entry point."""


class ProgramError(TwillError):
    """A program could not be found, loaded or built with the given parameters."""


class ProblemError(TwillError):
    """The loop body and the architecture disagree: an op uses a unit the arch lacks, ..."""


class InfeasibleError(TwillError):
    """Proven: no schedule exists within the stated range; ``reason`` says why when known."""

    def __init__(self, message: str, *, reason: str = "", proven_lb: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.proven_lb = proven_lb  # every smaller II is proven infeasible (a time-out knows this much)


class UsageError(TwillError, ValueError):
    """A bad argument value: a file suffix twill cannot write, a non-positive size, ..."""


class ScheduleError(TwillError):
    """A schedule file is malformed or does not match its program."""


class SimulationError(TwillError):
    """The simulator found a deadlock or a protocol violation; ``waiting`` lists who waits on what."""

    def __init__(self, message: str, *, waiting: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.waiting = waiting
