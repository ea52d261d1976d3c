"""The storage bound: memories must hold, on average over one II, what the schedule keeps there."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from twill.arch.registry import get_arch
from twill.bounds import (
    _gap_cuts,
    _storage_excess,
    binding_memory,
    bound_and_reason,
    compute_bounds,
    residue_cuts,
    shortest_lifetimes,
    storage_mii,
)
from twill.errors import InfeasibleError
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.solver import SolveOptions, lower_bound


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


# -- residue cuts: a capacity-1 unit and a dependence path together ------------------------------
def test_residue_cut_pushes_each_pv_a_turn_past_its_qk_on_b200():
    """At II < 2358 the softmax chain (1846 cycles) ends inside the tensor cores' gap after Q·K_j's
    own 512-cycle slot one turn later, so P·V_j starts at least II + 512 after Q·K_j (design.md §5)."""
    arch = get_arch("b200")
    p = build_problem(load_program("fa_fwd", arch, {"subtiles": 2}), arch)
    ahead = {(c.before, c.after, c.turns, c.gap, c.ii_from, c.ii_to) for c in residue_cuts(p, 2048, 4096)
             if c.turns > 0}
    assert ahead == {("qk0", "pv0", 1, 512, 2048, 2357), ("qk1", "pv1", 1, 512, 2048, 2357)}
    assert not any(c.turns > 0 for c in residue_cuts(p, 2358, 4096))  # from 2358 the chain fits in a turn


@settings(max_examples=300, deadline=None)
@given(ii=st.integers(4, 40), la=st.integers(1, 20), lb=st.integers(1, 20), p=st.integers(-120, 120),
       shift=st.integers(-5, 5))
def test_residue_cuts_give_exactly_the_least_distance_the_unit_allows(ii, la, lb, p, shift):
    """Against brute force: the least D' >= p whose residue mod II leaves both reservations apart
    is what the path and the applicable cuts together say, never more (valid), never less (tight)."""
    assume(la + lb <= ii)
    least = next(d for d in range(p, p + 2 * ii + 1) if la <= d % ii <= ii - lb)
    said = max([p] + [c.turns * ii + c.gap - shift for c in _gap_cuts("a", "b", p, la, lb, shift, ii, ii)])
    assert said == least


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(4, 30), width=st.integers(0, 30), la=st.integers(1, 10), lb=st.integers(1, 10),
       p=st.integers(-100, 100))
def test_residue_cuts_of_a_window_say_at_each_ii_what_that_ii_alone_says(lo, width, la, lb, p):
    """A window's cuts, restricted to the IIs each covers, bound D' exactly as a one-II model would."""
    assume(la + lb <= lo)
    window = _gap_cuts("a", "b", p, la, lb, 0, lo, lo + width)
    for ii in range(lo, lo + width + 1):
        here = max([p] + [c.turns * ii + c.gap for c in window if c.ii_from <= ii <= c.ii_to])
        alone = max([p] + [c.turns * ii + c.gap for c in _gap_cuts("a", "b", p, la, lb, 0, ii, ii)])
        assert here == alone


def test_in_order_issue_bounds_ii_by_the_holds_per_group():
    """Three synchronous 10-cycle warpgroup ops on an arch with room for one 4-warp group (5 warps
    per CTA) must issue from that one group, one after another: II >= 30, though the units allow
    10; the solver's optimum meets the bound."""
    from twill import Issuer, LoopBuilder, Use
    from twill.bounds import issue_mii
    from twill.random_loops import tiny_arch
    from twill.solver import solve
    from twill.validate import validate

    arch = next(a for a in (tiny_arch(s) for s in range(40)) if a.limit("warps_per_cta") == 5)
    b = LoopBuilder("three_holds")
    for name, unit in (("a", "alu"), ("b", "tc"), ("c", "alu")):
        b.op(name, kind="work", uses=[Use(unit=unit, length=10)], latency=10, issuer=Issuer.WARPGROUP)
    p = build_problem(b.build(), arch)
    assert compute_bounds(p).mii == 10
    ii, why = issue_mii(p, SolveOptions())
    assert ii == 30 and "at most 1 groups of 4+ warps" in why
    assert bound_and_reason(p, SolveOptions())[0] == 30
    sched = solve(p, SolveOptions(workers=1, time_limit=60))
    assert sched.ii == 30 and sched.status == "optimal" and validate(p, sched) == []


def test_a_resident_rings_shortfall_lengthens_one_member_only_for_sums():
    """FA forward's O accumulator passes its registers P·V -> rescale -> next P·V in place: together the two
    values hold them for one II (2048), so the ring's shortfall goes to P·V for sums over the ring; alone, P·V
    is held 571 cycles (its own shortest lifetime), which is what a per-value count of copies may use."""
    h100 = get_arch("h100")
    p = build_problem(load_program("fa_fwd", h100, {"subtiles": 2}), h100)
    ring = shortest_lifetimes(p, 2048, ["pv0", "rescale0"])
    own = shortest_lifetimes(p, 2048, ["pv0", "rescale0"], resident=False)
    assert ring["pv0"] + ring["rescale0"] == 2048 and own == {"pv0": 571, "rescale0": 75}


def test_the_binding_memory_is_named_where_a_memory_sets_the_bound():
    """random-regs-16009 (b200) is bound by the register file's average occupancy, FA forward on h100 by its
    tensor cores (no memory): what decides where Benders over groupings runs (design.md §3.1f)."""
    from twill.random_loops import random_body

    b200, h100 = get_arch("b200"), get_arch("h100")
    regs = build_problem(random_body(16009, 19, profile="regs"), b200)
    assert binding_memory(regs, SolveOptions()) == "registers"
    assert bound_and_reason(regs, SolveOptions())[1].startswith("registers:")
    assert binding_memory(build_problem(load_program("fa_fwd", h100, {"subtiles": 2}), h100), SolveOptions()) is None
    assert binding_memory(regs, SolveOptions(swp_only=True)) is None


def _ring(latency_ab: int = 10):
    """Two 10-cycle warpgroup ops on h100 in a recurrence a -> b -> next a, each result 8 registers; b may
    issue ``latency_ab`` cycles after a (an edge shorter than a's latency: b reads an early part)."""
    from twill import Issuer, LoopBuilder, Use

    b = LoopBuilder("ring")
    b.op("a", kind="work", uses=[Use(unit="alu", length=10)], latency=10, issuer=Issuer.WARPGROUP, regs=8)
    b.op("b", kind="work", uses=[Use(unit="fp32", length=10)], latency=10, issuer=Issuer.WARPGROUP, regs=8)
    b.edge("a", "b", latency=latency_ab)
    b.edge("b", "a", distance=1)
    arch = get_arch("h100")
    return build_problem(b.build(), arch)


def test_pinned_groups_put_their_hand_offs_and_waits_into_the_recurrence_bound():
    """Pinned apart, each value of the ring crosses groups through shared memory (157 cycles each way on
    h100), so II >= 10 + 10 + 2 x 157 = 334; pinned together, a holds the group 10 cycles before b may issue,
    even where the edge lets b start 4 cycles after a, so II >= 20 where the free problem's static bound is 14 (its optimum
    is 20 too: apart, the hand-offs cost more). The solver meets each pinned bound with a proof."""
    from twill.solver import solve
    from twill.validate import validate

    cases = ((_ring(), (), 20, 20), (_ring(), (("a", 0), ("b", 1)), 334, 334), (_ring(4), (), 14, 20),
             (_ring(4), (("a", 0), ("b", 0)), 20, 20))
    for p, pins, bound, ii in cases:
        o = SolveOptions(workers=1, time_limit=30, fixed_groups=pins)
        lb, why = bound_and_reason(p, o)
        assert lb == bound and ("pinned" in why) == bool(pins)
        sched = solve(p, o)
        assert (sched.ii, sched.status) == (ii, "optimal") and validate(p, sched) == []


def test_z3_names_the_pinned_bound_it_meets():
    """The z3 backend starts from the same bound and says what binds it, not the free problem's recurrence."""
    from twill.solver.z3_backend import solve_z3

    sched = solve_z3(_ring(), SolveOptions(workers=1, time_limit=60, fixed_groups=(("a", 0), ("b", 1))))
    assert (sched.status, sched.ii) == ("optimal", 334)
    assert sched.proof == ("optimal: II meets the lower bound 334 (recurrence a -> b with the pinned groups' hand-offs "
                           "and in-order waits (latency 334 over distance 1))")


def test_the_ops_pinned_to_one_group_bound_ii_by_their_holds():
    """Three independent 10-cycle warpgroup ops on three units: free, II >= 10 (each in its own group); pinned to
    one group, they issue one after another, II >= 30, and the solver meets it."""
    from twill import Issuer, LoopBuilder, Use
    from twill.solver import solve

    b = LoopBuilder("three")
    for name, unit in (("a", "alu"), ("b", "fp32"), ("c", "mufu")):
        b.op(name, kind="work", uses=[Use(unit=unit, length=10)], latency=10, issuer=Issuer.WARPGROUP)
    p = build_problem(b.build(), get_arch("h100"))
    assert bound_and_reason(p, SolveOptions())[0] == 10
    one = SolveOptions(workers=1, time_limit=30, fixed_groups=(("a", 5), ("b", 5), ("c", 5)))
    lb, why = bound_and_reason(p, one)
    assert (lb, why) == (30, "in-order issue: the ops pinned to group 5 hold it 30 cycles per iteration")
    assert solve(p, one).ii == 30
    two = SolveOptions(fixed_groups=(("a", 5), ("b", 5)))  # c unpinned: only the pinned holds count
    assert bound_and_reason(p, two)[0] == 20


def test_fa4_roles_pinned_keep_the_s_tile_in_tmem_longer():
    """FA4's roles pinned on b200 (o_chunks 2): the last P store (softmax warpgroup) reaches P·V (the MMA warp)
    through an mbarrier, so each S tile lives longer and TMEM's average occupancy needs II >= 2546, 100 cycles
    above the free problem's 2446; CP-SAT took 85 s (2 workers) to prove 2539 of it in the search."""
    import runpy

    from twill.options import pin_groups

    p = _fa4(s_frags=4, split_p=3, o_chunks=2, emu=0.125)
    roles = runpy.run_path("programs/fa_fwd.py")["FA4_ROLES"]
    pins = pin_groups([op.name for op in p.ops], roles)
    assert bound_and_reason(p, SolveOptions())[0] == 2446
    lb, why = bound_and_reason(p, SolveOptions(fixed_groups=pins))
    assert lb == 2546 and why.startswith("tmem:") and "pinned" in why


def test_show_prints_the_bound_under_the_pinned_groups(capsys):
    """`twill show --groups` prints the bound of that grouping; a name that is no op is one line and exit 2."""
    import runpy

    from twill.cli import main

    roles = runpy.run_path("programs/fa_fwd.py")["FA4_ROLES"]
    fa4 = ["fa_fwd", "--arch", "b200", "-p", "subtiles=2", "-p", "block_m=256", "-p", "s_frags=4", "-p", "split_p=3",
           "-p", "o_chunks=2", "-p", "emu=0.125"]
    assert main(["show", *fa4]) == 0
    assert "joint problem (warp groups and memories): II >= 2446; tmem:" in capsys.readouterr().out
    assert main(["show", *fa4, "--groups", roles]) == 0
    assert "joint problem (warp groups and memories, the groups pinned): II >= 2546; tmem:" in capsys.readouterr().out
    assert main(["show", "toy", "--arch", "h100", "--groups", "zz=1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == "twill: error: --groups names zz, not ops of toy (ops: S, P, O)"


def test_a_feasible_answer_names_its_bound():
    """An answer the budget ends before any proof still says why no smaller II exists: FA4's roles pinned, one unit
    of work: the pinned groups' TMEM bound."""
    import runpy

    from twill.options import pin_groups
    from twill.solver import solve

    p = _fa4(s_frags=4, split_p=3, o_chunks=2, emu=0.125)
    pins = pin_groups([op.name for op in p.ops], runpy.run_path("programs/fa_fwd.py")["FA4_ROLES"])
    sched = solve(p, SolveOptions(workers=1, time_limit=120, work_limit=1, fixed_groups=pins))
    assert (sched.status, sched.ii_lower_bound) == ("feasible", 2546)
    assert sched.proof.startswith("feasible: the search's work budget is spent; every II below 2546 is proven "
                                  "infeasible (lower bound 2546: tmem: ")
    assert sched.proof.endswith("with the pinned groups' hand-offs and in-order waits)")


def test_the_pinned_in_order_bound_counts_the_hand_off_copies_between_pinned_groups():
    """a -> b -> c carry 64-register tiles; with a and c pinned to one group and b to another, both tiles cross
    groups through SMEM, so group 0 holds a's store (5 cycles on h100) and c's load (5) beside their own 200: II
    >= 210, which the solver meets with a proof. With b unpinned it may join group 0 and copy nothing: 200."""
    from twill import Issuer, LoopBuilder, Use
    from twill.solver import solve
    from twill.validate import validate

    b = LoopBuilder("handoff3")
    for name, unit in (("a", "alu"), ("b", "fp32"), ("c", "mufu")):
        b.op(name, kind="work", uses=[Use(unit=unit, length=100)], latency=100, issuer=Issuer.WARPGROUP, regs=64)
    b.edge("a", "b")
    b.edge("b", "c")
    p = build_problem(b.build(), get_arch("h100"))
    assert bound_and_reason(p, SolveOptions())[0] == 100
    apart = SolveOptions(workers=1, time_limit=60, fixed_groups=(("a", 0), ("b", 1), ("c", 0)))
    assert bound_and_reason(p, apart) == (210, "in-order issue: the ops pinned to group 0 hold it 210 cycles per "
                                          "iteration, 10 of them the SMEM copies of its register hand-offs to other "
                                          "groups")
    sched = solve(p, apart)
    assert (sched.ii, sched.status) == (210, "optimal") and validate(p, sched) == []
    assert bound_and_reason(p, SolveOptions(fixed_groups=(("a", 0), ("c", 0))))[0] == 200
