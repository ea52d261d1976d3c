"""Solvers: the CP-SAT formulation (model.py) and the search over II and objectives (search.py)."""

from twill.bounds import lower_bound
from twill.options import SolveOptions
from twill.solver.search import solve

__all__ = ["SolveOptions", "solve", "lower_bound"]
