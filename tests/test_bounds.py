"""The storage bound: memories must hold, on average over one II, what the schedule keeps there."""

from twill.bounds import _storage_excess, compute_bounds, storage_mii
from twill.errors import InfeasibleError
from twill.problem import build_problem
from twill.programs import load_program
from twill.registry import get_arch
from twill.solver import SolveOptions, lower_bound
from twill.solver.search import bound_and_reason


def _fa4(**params):
    arch = get_arch("b200")
    return build_problem(load_program("fa_fwd", arch, {"subtiles": 2, "block_m": 256, **params}), arch)


def test_fa4_cta_is_bound_by_tmem_not_by_the_mufu():
    """Two 128-row S tiles must each live from Q·Kᵀ until P·V has read P (aliased in S's columns):
    about 3478 cycles, so at II near the MUFU bound 2064 TMEM would need more than 512 columns."""
    p = _fa4()
    b = compute_bounds(p)
    assert b.mii == 2064 and b.binding().startswith("unit 'mufu'")
    s = storage_mii(p, b.mii, 100_000)
    assert s is not None and s.memory == "tmem" and s.ii == 2200
    # exact: the condition fails at II - 1 and holds at II
    assert _storage_excess(p, 2199)[0] == "tmem" and _storage_excess(p, 2200) is None
    lb, why = bound_and_reason(p, SolveOptions())
    assert lb == 2200 and why.startswith("tmem:")
    assert lower_bound(p, SolveOptions(swp_only=True)) == 2064  # pure modulo scheduling keeps no memory


def test_storage_bound_is_silent_when_memories_fit():
    arch = get_arch("h100")
    p = build_problem(load_program("fa_fwd", arch, {"subtiles": 2}), arch)
    assert storage_mii(p, compute_bounds(p).mii, 100_000) is None


def test_a_timed_out_joint_solve_reports_the_storage_bound():
    """Even when no schedule is found, the proven bound said is the storage bound, not the MUFU's."""
    from twill.solver import solve

    try:
        sched = solve(_fa4(), SolveOptions(time_limit=3, workers=1))
    except InfeasibleError as err:
        assert "II >= 2200 is proven" in str(err)
    else:
        assert sched.ii_lower_bound >= 2200
