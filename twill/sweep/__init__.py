"""Design-space search around the solver (``twill sweep``): which configuration of a kernel is
best on an arch, and by how much.

A sweep solves one loop body per point of a parameter grid (tile sizes, sub-tiling, ...) and
ranks the points by predicted throughput. ``space`` parses the grid, ``cache`` keys each result by
the content of body, arch and options, ``engines`` runs the solves (this process, a process pool,
or a Dask cluster), ``run`` ranks, ``tune`` lets Optuna pick points on a budget, ``plot`` draws
throughput against resources with the Pareto front. It sits at the top of the pipeline: it calls
``load_program`` and ``solve`` like any user, and nothing below imports it.
"""

from twill.sweep.cache import ResultCache, cache_key
from twill.sweep.engines import DaskEngine, InlineEngine, PoolEngine, make_engine
from twill.sweep.run import PointResult, SweepResult, pareto_front, rank, sweep_grid
from twill.sweep.source import ProgramSource
from twill.sweep.space import Space, parse_space

__all__ = ["ProgramSource", "Space", "parse_space", "ResultCache", "cache_key", "InlineEngine", "PoolEngine", "DaskEngine",
           "make_engine", "PointResult", "SweepResult", "sweep_grid", "rank", "pareto_front"]
