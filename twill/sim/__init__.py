"""The schedule simulator: replays a static schedule on a discrete-event model of one SM.

``simulate(problem, schedule, iterations, jitter, seed)`` runs warp groups as in-order issue
streams that share functional units and SMEM ring buffers (``gpu``), on a deterministic event
core (``engine``), and records what happened (``trace``). A valid schedule replays at exactly its
II; jitter on variable-latency ops shows how much slack it has; a deadlock raises
``SimulationError`` naming who waits on what.
"""

from twill.sim.gpu import STALL_CAUSES, SimResult, simulate
from twill.sim.trace import Span, Trace

__all__ = ["simulate", "SimResult", "Span", "Trace", "STALL_CAUSES"]
