"""twill: proven-optimal software pipelining and warp specialization for tensor-core GPU loops.

The pipeline is a chain of functions over values:
``load_program`` / ``read_ddg`` -> ``LoopBody`` -> ``build_problem`` -> ``Problem`` ->
``solve`` -> ``Schedule`` -> ``validate`` / ``simulate`` / ``render_gantt``.
"""

from twill.arch.model import Arch, Cost, Fact, Unit
from twill.errors import (
    ArchError,
    GraphError,
    InfeasibleError,
    PluginError,
    ProblemError,
    ProgramError,
    ScheduleError,
    SimulationError,
    TwillError,
)
from twill.frontend import ops
from twill.ir import Carrier, Edge, Issuer, LoopBody, LoopBuilder, Op, Use

__all__ = [
    "Arch", "Cost", "Fact", "Unit", "Carrier", "Edge", "Issuer", "LoopBody", "LoopBuilder", "Op", "Use", "ops",
    "TwillError", "GraphError", "ArchError", "PluginError", "ProgramError", "ProblemError", "InfeasibleError",
    "ScheduleError", "SimulationError",
]
__version__ = "0.1.0"
