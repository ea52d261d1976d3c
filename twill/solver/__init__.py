"""Solvers: the CP-SAT formulation (model.py) and the search over II and objectives (search.py)."""

from .model import SolveOptions
from .search import lower_bound, solve

__all__ = ["SolveOptions", "solve", "lower_bound"]
