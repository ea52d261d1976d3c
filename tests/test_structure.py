"""The warp-group structure relaxation (``twill.solver.structure``): a sound lower bound on the joint
II that is often tight, monotone in II (so bisection finds its least II), and a source of groupings
under which the heuristics find schedules where Triton's split finds none."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from twill.arch.registry import get_arch
from twill.bounds import colive_values, rec_mii
from twill.frontend.programs import load_program
from twill.problem import build_problem, read_time
from twill.random_loops import random_body, tiny_arch
from twill.solver import SolveOptions, lower_bound, solve, structure
from twill.solver.exhaustive import solve_exhaustive
from twill.solver.ims import ims_triton_split, iterative_modulo_schedule
from twill.solver.run import Work
from twill.solver.structure import build_structure, propose_grouping, structure_floor
from twill.validate import validate


def _work() -> Work:
    return Work.starting_now(600.0, 100.0)


def _feasible(p, options, ii) -> bool:
    s = build_structure(p, options, ii)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    status = solver.solve(s.m)
    assert status != cp_model.UNKNOWN
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def test_the_relaxation_never_refutes_an_optimum_and_often_meets_it():
    """On 120 tiny graphs whose joint optimum the exhaustive search proves (it trusts no bound),
    the structure floor is never above the optimum, raises the static bound on a fair share (21)
    and equals the optimum on at least half of those (14). (Seeds 29, 34 and 86 have cycles whose
    in-one-group waits exceed the static bound, so the waits of the recurrences family are checked too.)"""
    raised = tight = 0
    for seed in range(120):
        p = build_problem(random_body(seed, 2 + seed % 4, profile="tiny"), tiny_arch(seed))
        options = SolveOptions(workers=1)
        lb = lower_bound(p, options)
        floor = structure_floor(p, options, lb, lb + 200, _work())
        if floor is None:
            continue
        optimum = solve_exhaustive(p, options).ii
        assert floor.decided and floor.ii <= optimum, (seed, floor, optimum)
        raised += 1
        tight += floor.ii == optimum
    assert raised >= 15 and tight >= raised // 2


@pytest.mark.parametrize("profile,seed", [("regs", 1), ("recurrence", 2), ("loads", 3)])
def test_feasibility_is_monotone_in_ii(profile, seed):
    """Every family is monotone in II (docs/design.md §3.1b), which the bisection relies on:
    refuted at every II below the floor that is probed, feasible at every II from it on."""
    arch = "b200" if profile == "loads" else "h100"
    p = build_problem(random_body(seed, 12, profile=profile), get_arch(arch))
    options = SolveOptions(workers=1)
    lb = lower_bound(p, options)
    floor = structure_floor(p, options, lb, 20000, _work())
    assert floor is not None and floor.decided
    step = max(1, floor.ii // 40)
    for ii in range(max(lb, floor.ii - 6 * step), floor.ii + 6 * step, step):
        assert _feasible(p, options, ii) == (ii >= floor.ii), ii


def _oracle(monkeypatch, answer):
    """Replace the relaxation's fixed-II decision by ``answer(ii)``, recording the IIs probed (the checks of what
    binds, which drop a family, answer FEASIBLE and are not recorded)."""
    probed: list[int] = []

    def decide(problem, options, ii, work, drop=()):
        if drop:
            return cp_model.FEASIBLE
        probed.append(ii)
        return answer(ii)

    monkeypatch.setattr(structure, "_decide", decide)
    return probed


def test_the_floor_gallops_up_from_its_lower_end(monkeypatch):
    """Refutations far below the least feasible II are cheap and the first schedule's II is far above it, so the
    probes step up from the lower end (lo/64, doubling), never past the midpoint of what is left, and bisect once
    one is not refuted; the floor is the exact threshold."""
    probed = _oracle(monkeypatch, lambda ii: cp_model.INFEASIBLE if ii < 1000 else cp_model.FEASIBLE)
    floor = structure_floor(None, SolveOptions(workers=1), 640, 5000, _work())
    assert probed[:7] == [640, 650, 670, 710, 790, 950, 1270]
    assert floor.ii == 1000 and floor.decided
    assert max(probed) == 1270 and len(probed) <= 16
    probed = _oracle(monkeypatch, lambda ii: cp_model.INFEASIBLE if ii < 1000 else cp_model.FEASIBLE)
    assert structure_floor(None, SolveOptions(workers=1), 640, 700, _work()).ii == 701  # hi + 1: nothing passed
    assert max(probed) <= 700


def test_an_undecided_probe_keeps_what_was_refuted(monkeypatch):
    """A probe out of work proves nothing: the floor is the last refuted II + 1, marked undecided, and no probe
    goes above the undecided one."""
    probed = _oracle(monkeypatch, lambda ii: cp_model.INFEASIBLE if ii < 800 else cp_model.UNKNOWN)
    floor = structure_floor(None, SolveOptions(workers=1), 640, 5000, _work())
    assert probed[:6] == [640, 650, 670, 710, 790, 950]
    assert floor.ii == 800 and not floor.decided
    assert max(probed) == 950


def test_a_register_bound_body_names_what_binds():
    """An 11-op register-heavy body on h100: the static bound is 462 (MUFU and holds); below 802 no
    grouping fits in-order issue and registers, where a value handed to another group stays in its
    producer's registers until the reader has it (577 with each value's shortest lifetime alone)."""
    p = build_problem(random_body(1, 11, profile="regs"), get_arch("h100"))
    options = SolveOptions(workers=1)
    assert lower_bound(p, options) == 462
    floor = structure_floor(p, options, 462, 2000, _work())
    assert floor.ii == 802
    assert {"issue", "registers"} <= set(floor.binding)
    assert "warp-group structure" in floor.sentence()


def test_handoffs_lengthen_the_producers_lifetimes(monkeypatch):
    """The hand-off on a crossing edge delays its reader (§2.4), so the producer's group holds the
    value longer: without that (each value's shortest lifetime, whatever the grouping) the same body's
    floor is 577 instead of 802 (the test above)."""
    p = build_problem(random_body(1, 11, profile="regs"), get_arch("h100"))
    options = SolveOptions(workers=1)
    assert build_structure(p, options, 700).held  # the crossings on some value's paths cost cycles
    monkeypatch.setattr(structure, "_handoff_lifetimes", lambda s: {})
    assert structure_floor(p, options, 462, 2000, _work()).ii == 577


def test_proposed_groupings_meet_the_relaxation():
    """A proposed grouping at II keeps every group's holds within II and loads on their own."""
    p = build_problem(random_body(2, 14, profile="regs"), get_arch("h100"))
    options = SolveOptions(workers=1)
    floor = structure_floor(p, options, lower_bound(p, options), 5000, _work())
    for count in (2, 3):
        groups = propose_grouping(p, options, floor.ii, _work(), count)
        if groups is None:
            continue
        assert len(set(groups.values())) == count
        for g in set(groups.values()):
            members = [op for op in p.ops if groups[op.name] == g]
            assert sum(p.hold(op.name) for op in members) <= floor.ii
            if any(op.variable_latency for op in members):
                assert all(op.variable_latency or p.hold(op.name) == 0 for op in members)


def test_a_proposed_grouping_schedules_what_triton_split_cannot():
    """FlashAttention forward, two 64-row sub-tiles at head_dim 256 and block_n 64 on b200: under
    Triton's split (one consumer group) IMS overflows TMEM at every II; under the proposed grouping
    of one producer and one group per sub-tile it finds a valid schedule, so solve has an answer
    (it used to end 'no schedule found')."""
    arch = get_arch("b200")
    p = build_problem(load_program("fa_fwd", arch, {"subtiles": 2, "head_dim": 256, "block_n": 64}), arch)
    options = SolveOptions(workers=1)
    assert ims_triton_split(p).schedule is None
    groups = propose_grouping(p, options, 2208, _work(), 3)
    assert {groups[n] for n in ("load_k", "load_v")} == {0}
    assert groups["qk0"] != groups["qk1"]
    sched = iterative_modulo_schedule(p, options, groups=groups).schedule
    assert sched is not None and validate(p, sched) == []


def test_solve_uses_the_structure_floor_as_a_bound():
    """The solve reports the structure floor as its proven bound where nothing else binds as high."""
    p = build_problem(random_body(1, 11, profile="regs"), get_arch("h100"))
    sched = solve(p, SolveOptions(workers=1, work_limit=4.0, time_limit=600.0,
                                  objective=("ii",)))
    assert validate(p, sched) == []
    assert sched.ii_lower_bound >= 566
    assert sched.ii >= sched.ii_lower_bound


def _recurrence_16515():
    """A 63-op body whose 48-op recurrence (3718 cycles over distance 1) crosses groups only at hand-off
    costs of 156-308 cycles, and four of whose ALU/FP32 ops hold their group 4 cycles past their latency
    (the fresh suite case random-recurrence-16515-n63-b200)."""
    return build_problem(random_body(16515, 63, profile="recurrence"), get_arch("b200"))


def test_a_recurrence_in_one_group_waits_out_its_holds():
    """In-order issue on a recurrence: kept in one group (any crossing costs more than the slack) the
    cycle is 3718 + 4 x 4 = 3734 cycles, so no grouping fits below II 3734; a consumer issued by its
    producer's group waits max(latency, hold) (``Problem.same_group_latency``)."""
    p = _recurrence_16515()
    r = rec_mii(p)
    assert (r.latency, r.distance, len(r.ops)) == (3718, 1, 48)
    waits = [e for e in p.edges if p.same_group_latency(e) > e.latency]
    assert sorted(p.same_group_latency(e) - e.latency for e in waits) == [4, 4, 4, 4]
    assert all(p.same_group_latency(e) == max(e.latency, p.hold(e.src)) for e in waits)
    options = SolveOptions(workers=1)
    floor = structure_floor(p, options, 3718, 4000, _work())
    assert floor.decided and floor.ii == 3734
    assert "recurrences" in floor.binding
    assert "issue order on recurrences" in floor.sentence()


def _waits_can_bind(p, lb: int) -> bool:
    """Some cycle kept in one group, waits included, does not fit at the static bound."""
    for cycle in structure._cycles(p):
        chosen = structure.cycle_edges(p, cycle)
        latency, distance = sum(e.latency for _, e in chosen), sum(e.distance for _, e in chosen)
        one_group = structure.in_one_group(p, chosen)
        if distance and one_group > latency and one_group > distance * lb:
            return True
    return False


def test_the_waits_never_refute_an_optimum():
    """On the tiny graphs of seeds 0-399 where a cycle's waits can bind (18 of them), the structure floor
    is above the static bound on every one, never above the joint optimum the exhaustive search proves,
    and equal to it on at least half."""
    seen = tight = 0
    for seed in range(400):
        p = build_problem(random_body(seed, 2 + seed % 4, profile="tiny"), tiny_arch(seed))
        options = SolveOptions(workers=1)
        lb = lower_bound(p, options)
        if not _waits_can_bind(p, lb):
            continue
        floor = structure_floor(p, options, lb, lb + 400, _work())
        optimum = solve_exhaustive(p, options).ii
        assert floor is not None and lb < floor.ii <= optimum, (seed, lb, floor, optimum)
        seen += 1
        tight += floor.ii == optimum
    assert seen >= 15 and tight >= seen // 2


@pytest.mark.slow
def test_the_waits_refute_only_what_the_joint_model_refutes(monkeypatch):
    """Soundness where the waits bind: the joint model itself (in-order issue as a modular no-overlap)
    refutes II 3720, which the relaxation refutes without starts; and without in-order issue it has a
    schedule there, so the waits are what refutes it."""
    from twill.solver import model

    p = _recurrence_16515()
    assert not _feasible(p, SolveOptions(workers=1), 3733) and _feasible(p, SolveOptions(workers=1), 3734)
    families = model.JOINT_FAMILIES
    for drop, expected in (((), cp_model.INFEASIBLE), (("in_order_issue",), cp_model.OPTIMAL)):
        monkeypatch.setattr(model, "JOINT_FAMILIES", tuple(f for f in families if f[0] not in drop))
        v = model.build_model(p, SolveOptions(workers=1), 3720, 3720)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.linearization_level = 2
        solver.parameters.max_deterministic_time = 60.0
        assert solver.solve(v.m) == expected, drop


@pytest.mark.slow
def test_solve_proves_the_recurrence_with_its_waits_optimal():
    """The search: the structure floor 3734 and a schedule at 3734, so II 3734 is proven optimal
    (before the waits: 3734 >= 3719 after 30 units)."""
    p = _recurrence_16515()
    sched = solve(p, SolveOptions(workers=1, work_limit=30.0, time_limit=600.0))
    assert validate(p, sched) == []
    assert sched.status == "optimal" and sched.ii == 3734 == sched.ii_lower_bound


def _held_intervals(p, starts: dict[str, int], ii: int) -> dict[str, tuple[int, int]]:
    """Each value's [issue, end of its last read) at ``ii``, as ``ScheduleModel.lifetime_of`` defines it."""
    out = {}
    for op in p.ops:
        ends = [starts[e.dst] + e.distance * ii + read_time(e, p.op(e.dst)) for e in p.body.out_edges(op.name)]
        out[op.name] = (starts[op.name], max(ends) if ends else starts[op.name] + op.latency)
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), profile=st.sampled_from(["regs", "handoff", "fa", "recurrence", "units"]),
       n_ops=st.integers(4, 24), extra=st.integers(0, 4000), slack=st.integers(0, 10_000))
def test_every_colive_set_is_held_together_in_any_schedule_of_the_dependences(seed, profile, n_ops, extra, slack):
    """Soundness of ``colive_values``: at any II the dependences allow, however late each op issues
    after its producers, the values of a co-live set are all held at one cycle."""
    p = build_problem(random_body(seed, n_ops, profile=profile), get_arch("h100"))
    rec = rec_mii(p)
    ii = (rec.ii if rec else 1) + extra
    rng = random.Random(slack)
    starts = {op.name: rng.randrange(0, 3 * ii + 1) for op in p.ops}
    for _ in range(len(p.ops) + 1):  # Bellman-Ford: push each consumer past its producers (no positive cycle)
        for e in p.edges:
            starts[e.dst] = max(starts[e.dst], starts[e.src] + e.latency - e.distance * ii)
    assert all(starts[e.dst] >= starts[e.src] + e.latency - e.distance * ii for e in p.edges)
    held = _held_intervals(p, starts, ii)
    for together in colive_values(p):
        assert max(held[n][0] for n in together) < min(held[n][1] for n in together), (together, held)


def test_colive_sets_follow_the_reads():
    """FA forward: P is read by its P·V until the wgmma completes, so P and the P·V accumulator are
    held together; S is held until exp reads it, past the row max; the accumulator hands its
    registers on in place (P·V -> rescale -> next P·V), so its two values are never held together."""
    p = build_problem(load_program("fa_fwd", get_arch("h100"), {"subtiles": 2}), get_arch("h100"))
    sets = [set(c) for c in colive_values(p)]
    assert {"cast0", "pv0"} in sets and {"qk0", "rowmax0"} in sets
    assert not any({"pv0", "rescale0"} <= c for c in sets)
    assert {n for c in sets for n in c} == {op.name for op in p.ops if op.regs}


def test_a_colive_set_too_large_for_one_warpgroup_keeps_its_values_apart():
    """random-handoff-16524's b0 chain: the wgmma result, the consumer's output and a later consumer's
    output are held together (37632 register words); one 4-warp group holds at most 128 x 255, so
    the structure relaxation refuses that grouping at any II, where the average alone admits it."""
    p = build_problem(random_body(16524, 15, profile="handoff"), get_arch("h100"))
    big = max(colive_values(p), key=lambda c: sum(p.op(n).regs for n in c))
    assert set(big) == {"b0_mma0", "b0_o2", "b0_o4"} and sum(p.op(n).regs for n in big) == 37632
    pins = tuple((n, 1) for n in big) + tuple((op.name, 0) for op in p.ops if op.kind == "load")
    s = build_structure(p, SolveOptions(workers=1, fixed_groups=pins), 4000)
    s.m.add(s.warps[1] == 4)
    assert cp_model.CpSolver().solve(s.m) == cp_model.INFEASIBLE
