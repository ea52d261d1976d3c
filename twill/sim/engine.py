"""A tiny deterministic discrete-event core: a heap of (time, priority, counter, callback).

Events at the same time run in priority order (the simulator passes an op's scheduled cycle, so
the op the static schedule placed first gets a contended unit first), then in the order they
were posted; nothing depends on hashing or wall-clock time, so a run is reproducible.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Engine"]


@dataclass
class Engine:
    """Runs callbacks in time order; ``now`` is the time of the event being run."""

    now: int = 0
    _heap: list[tuple[int, int, int, Callable[[], None]]] = field(default_factory=list)
    _counter: int = 0

    def at(self, time: int, callback: Callable[[], None], priority: int = 0) -> None:
        """Post ``callback`` to run at ``time`` (never in the past: time only moves forward)."""
        if time < self.now:
            raise ValueError(f"event at {time} is before the current time {self.now}")
        heapq.heappush(self._heap, (time, priority, self._counter, callback))
        self._counter += 1

    def pending(self) -> int:
        return len(self._heap)

    def run(self) -> None:
        """Run events until none is left."""
        while self._heap:
            time, _, _, callback = heapq.heappop(self._heap)
            self.now = time
            callback()
