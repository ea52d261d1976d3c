"""Issue 5: CP-SAT, z3 and exhaustive search agree on random loop bodies; every schedule validates.

The bodies come from ``twill.random_loops`` (profile "tiny": 2-5 ops, 1-6-cycle costs, small
distances and footprints) on ``tiny_arch``, whose warps, registers, SMEM and TMEM are small enough
to bind. Three independent answers to "what is the smallest II?" are compared: CP-SAT (the
product), z3 (another encoding, another solver) and exhaustive enumeration from II = 1 (whose
verdict is the validator's, and which trusts no lower bound, so it also checks ``lower_bound``).
A disagreement names a bug in one of them; the pinned ``@example`` cases are the ones found so
far (docs/benchmarks_notes.md, "Differential testing").

The CI run draws 200 graphs with a derandomized Hypothesis strategy; ``-m slow`` runs 2000
consecutive seeds and reports every finding at once.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import H100_ISSUE8
from twill.arch.registry import get_arch
from twill.body_json import body_document, body_from_document
from twill.errors import InfeasibleError
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.problem import Problem, build_problem
from twill.random_loops import random_body, sequential_witness, tiny_arch, witness_ii
from twill.schedule import Schedule
from twill.solver import SolveOptions, lower_bound, solve
from twill.solver.exhaustive import SearchStats, solve_exhaustive
from twill.solver.ims import ims_swp, ims_triton_split
from twill.solver.run import Work
from twill.solver.strategies import producer_consumer_split
from twill.solver.structure import structure_floor
from twill.solver.z3_backend import solve_z3
from twill.validate import validate

CI_GRAPHS = 200
TIME_LIMIT = 600.0  # per solve: a time-out is not an answer, and a busy machine should not cause one
SLOW_SEED, SLOW_GRAPHS = 100_000, 2000  # the slow run: seeds [SLOW_SEED, SLOW_SEED + SLOW_GRAPHS)
CI = settings(max_examples=CI_GRAPHS, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def graph_size(seed: int) -> int:
    """The op count of graph ``seed``: 2, 3, 4, 5 in turn."""
    return 2 + seed % 4


@cache
def tiny_problem(seed: int, n: int) -> Problem:
    return build_problem(random_body(seed, n, profile="tiny"), tiny_arch(seed))


@cache
def cpsat(seed: int, n: int, swp_only: bool) -> Schedule:
    """CP-SAT with its default objectives, one worker (cached: several properties read it)."""
    return solve(tiny_problem(seed, n), SolveOptions(swp_only=swp_only, workers=1, time_limit=TIME_LIMIT))


def _json(s: Schedule) -> dict:
    d = s.reproducible_dict()  # wall-clock timings aside, the rest must match
    d.pop("work")  # deterministic per worker count; the comparisons here cross counts and backends
    return d


@dataclass
class Findings:
    """What one graph showed: contradicting answers (each one a bug) and time-outs (not answers;
    their partial claims, the proven bounds, must still hold)."""

    wrong: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)


def _attempt(findings: Findings, what: str, call: Callable[[], Schedule]) -> Schedule | None:
    """Run a backend; every graph has a schedule (its sequential witness), so "infeasible" is wrong."""
    try:
        return call()
    except InfeasibleError as err:
        (findings.undecided if err.reason == "time limit" else findings.wrong).append(f"{what}: {err}")
        return None


def check_graph(seed: int, n: int, *, secondary: bool = False) -> Findings:
    """Every way the backends and heuristics disagree on graph (seed, n), as readable lines.
    With ``secondary``, z3 also minimises the secondary objectives of the joint problem, and
    every objective both backends prove must have the same value."""
    p = tiny_problem(seed, n)
    where = f"random_body({seed}, {n}, profile='tiny') on tiny_arch({seed})"
    found = Findings()
    optimum: dict[bool, int | None] = {}
    for swp_only in (True, False):
        mode = f"{where} {'swp-only' if swp_only else 'joint'}"
        options = SolveOptions(swp_only=swp_only, workers=1, time_limit=TIME_LIMIT)
        full = secondary and not swp_only
        z3_options = replace(options, objective=options.objective if full else ("ii",))
        runs = {
            "cp-sat": _attempt(found, f"{mode}: cp-sat", lambda swp_only=swp_only: cpsat(seed, n, swp_only)),
            "z3": _attempt(found, f"{mode}: z3", lambda o=z3_options: solve_z3(p, o)),
            # from II = 1: the exhaustive search trusts no lower bound, so it tests them
            "exhaustive": _attempt(found, f"{mode}: exhaustive", lambda o=options: solve_exhaustive(p, o, ii_from=1)),
        }
        done = {name: s for name, s in runs.items() if s is not None}
        for name, s in done.items():
            broken = validate(p, s)
            if broken:
                found.wrong.append(f"{mode}: the {name} schedule fails the validator: {broken[0]}")
        proven = {name: s.ii for name, s in done.items() if s.status == "optimal"}
        if len(set(proven.values())) > 1:
            found.wrong.append(f"{mode}: the proven optimal IIs differ: {proven}")
        best = min(proven.values()) if proven else None
        for name, s in done.items():
            if s.status != "optimal":
                found.undecided.append(f"{mode}: {name} did not prove its II {s.ii} ({s.proof})")
                if best is not None and not s.ii_lower_bound <= best <= s.ii:
                    found.wrong.append(f"{mode}: {name} claims II >= {s.ii_lower_bound} with a schedule at "
                                       f"{s.ii}; the optimum is {best}")
        if best is not None and not lower_bound(p, options) <= best <= witness_ii(p):
            found.wrong.append(f"{mode}: II {best} outside [lower bound {lower_bound(p, options)}, "
                               f"sequential witness {witness_ii(p)}]")
        if not swp_only and best is not None:
            floor = structure_floor(p, options, lower_bound(p, options), best, Work.starting_now(TIME_LIMIT, 100.0))
            if floor is not None and floor.ii > best:
                found.wrong.append(f"{mode}: the structure relaxation refutes II {best}, the optimum")
        if full and "cp-sat" in done and "z3" in done:
            found.wrong += _objective_disagreements(p, mode, done["cp-sat"], done["z3"])
        optimum[swp_only] = best
    if None not in optimum.values() and optimum[False] < optimum[True]:
        found.wrong.append(f"{where}: the joint optimum {optimum[False]} is below the swp-only one {optimum[True]}")
    # heuristics: never below the proven optimum of the problem they solve, and always valid
    split = SolveOptions(fixed_groups=producer_consumer_split(p), time_limit=TIME_LIMIT)
    for name, result, optimal in (
        ("IMS (swp-only)", ims_swp(p), lambda: optimum[True]),
        ("IMS under Triton's split", ims_triton_split(p), lambda: solve_exhaustive(p, split).ii),
    ):
        s = result.schedule
        if s is None:
            continue
        bound = optimal()
        if bound is not None and s.ii < bound:
            found.wrong.append(f"{where}: {name} reports II {s.ii}, below the proven optimum {bound}")
        if validate(p, s):
            found.wrong.append(f"{where}: the {name} schedule fails the validator: {validate(p, s)[0]}")
    return found


# -- the CI run --------------------------------------------------------------------------------
SEEDS = st.integers(0, 10**6)  # a graph is (seed, graph_size(seed)): 2..5 ops in equal shares


@CI
@given(seed=SEEDS)
@example(seed=271)  # CP-SAT proved length 20 optimal where 19 exists (the cumulative bug, benchmarks_notes.md)
@example(seed=370)  # CP-SAT proved II 11 optimal where 10 exists (the same bug, in an II window)
@example(seed=14966)  # z3: an op whose hold is only a hand-off copy, 0 in its grouping, overlapped others
@example(seed=100624)  # CP-SAT proved length 6 where 4 exists: a zero-size copy interval inside another hold
@example(seed=101862)  # exhaustive: II 8 where 7 exists: a copy made an op that holds nothing count for isolation
def test_backends_agree_on_the_optimal_ii(seed):
    """CP-SAT, z3 and exhaustive search find the same optimal II, swp-only and joint; every
    schedule validates; no heuristic beats the optimum of its problem."""
    # given a random tiny graph; when every backend solves it; then they agree
    assert check_graph(seed, graph_size(seed)).wrong == []


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=SEEDS)
@example(seed=271)
def test_secondary_objectives_agree_and_match_the_schedule(seed):
    """Where both backends prove a secondary objective (groups, hand-offs, registers, length), they
    agree on its value, and the values a backend reports are those of the schedule it returns."""
    n = graph_size(seed)
    p = tiny_problem(seed, n)
    c, z = cpsat(seed, n, False), solve_z3(p, SolveOptions(time_limit=TIME_LIMIT))
    assert validate(p, z) == [] and z.ii == c.ii
    assert _objective_disagreements(p, f"graph {seed}", c, z) == []


def _objective_disagreements(p: Problem, where: str, c: Schedule, z: Schedule) -> list[str]:
    out = []
    for name, s in (("cp-sat", c), ("z3", z)):
        # the certificate, not the claim: recompute each value from the schedule
        crossing = sum(p.handoff_bytes(e) for e in p.edges if s.group_of(e.src) != s.group_of(e.dst))
        actual = {"ii": s.ii, "groups": len(s.groups), "handoffs": crossing,
                  "regs": sum(32 * g.warps * g.regs_per_thread for g in s.groups), "length": s.length}
        if s.objective_values != actual:
            out.append(f"{where}: {name} reports {s.objective_values} but its schedule has {actual}")
    proven = [k for k in c.objective_values
              if c.options["objective_proven"].get(k) and z.options["objective_proven"].get(k)]
    mine, theirs = ({k: s.objective_values[k] for k in proven} for s in (c, z))
    if mine != theirs:
        out.append(f"{where}: proven objectives differ: cp-sat {mine}, z3 {theirs}")
    return out


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=SEEDS)
def test_solving_is_deterministic(seed):
    """The same input gives the same JSON: CP-SAT twice and with two workers, z3 and exhaustive twice."""
    n = graph_size(seed)
    p = tiny_problem(seed, n)
    first = cpsat(seed, n, False)
    assert all(first.options["objective_proven"].values())  # determinism is promised for proven values
    assert _json(solve(p, SolveOptions(workers=1))) == _json(first)
    assert _json(solve(p, SolveOptions(workers=2))) == _json(first)
    assert _json(solve_z3(p, SolveOptions(objective=("ii",)))) == _json(solve_z3(p, SolveOptions(objective=("ii",))))
    assert _json(solve_exhaustive(p, SolveOptions())) == _json(solve_exhaustive(p, SolveOptions()))


def _accumulator_and_its_reader(cap: int) -> Problem:
    """An MMA whose 15000-word accumulator an exp reads into 15000 words of its own: together
    they overflow one warpgroup (4 warps x (248 - 24 reserved) x 32 lanes = 28672 words)."""
    mma = Op(name="mma", kind="mma", uses=(Use(unit="tc", length=40),), latency=48, is_async=True, issue_cycles=8,
             issuer=Issuer.WARPGROUP, regs=15000, max_warps=cap, handoff_cycles=20)
    ex = Op(name="ex", kind="exp", uses=(Use(unit="mufu", length=30),), latency=32, issuer=Issuer.WARPGROUP,
            regs=15000, handoff_cycles=20)
    body = LoopBody("accumulator", (mma, ex), (Edge(src="mma", dst="ex", latency=48, carrier=Carrier.REGISTERS),
                                               Edge(src="ex", dst="mma", latency=32, distance=1,
                                                    carrier=Carrier.REGISTERS)))
    return build_problem(body, get_arch(H100_ISSUE8))


@pytest.mark.parametrize("cap, ii, groups", [(0, 80, [(8, ("mma", "ex"))]), (4, 120, [(4, ("mma",)), (4, ("ex",))])])
def test_backends_agree_on_a_wgmma_accumulator_cap(cap, ii, groups):
    """Uncapped, one 8-warp group holds both values at II 48 + 32 = 80. A 64-row wgmma keeps its
    accumulator in one warpgroup (``max_warps`` 4): the exp moves to a group of its own and each
    direction pays the 20-cycle hand-off, 48 + 20 + 32 + 20 = 120. CP-SAT, z3 and enumeration
    agree, and the validator accepts each."""
    p = _accumulator_and_its_reader(cap)
    assert body_from_document(json.loads(json.dumps(body_document(p.body)))) == p.body  # the cap survives a file
    for backend in (solve, solve_z3, solve_exhaustive):
        s = backend(p, SolveOptions(time_limit=120, work_limit=10))
        assert s.ii == ii and [(g.warps, g.ops) for g in s.groups] == groups, backend.__name__
        assert validate(p, s) == []


def test_the_tiny_arch_limits_bind():
    """On a fair share of graphs the joint optimum exceeds the swp-only one: warps, registers,
    SMEM, TMEM, in-order issue or hand-offs cost II, so the joint families are exercised."""
    seeds = range(60)
    raised = sum(solve_exhaustive(tiny_problem(s, graph_size(s)), SolveOptions()).ii >
                 solve_exhaustive(tiny_problem(s, graph_size(s)), SolveOptions(swp_only=True)).ii for s in seeds)
    assert raised >= len(seeds) // 5


# -- the generator -------------------------------------------------------------------------------
@pytest.mark.parametrize("profile", ["fa", "tiny"])
def test_random_body_is_a_pure_function_of_its_arguments(profile):
    """Same (seed, n_ops, profile), same body; another seed, another body; exactly n_ops ops."""
    n = 12 if profile == "fa" else 5
    a, b, c = random_body(5, n, profile=profile), random_body(5, n, profile=profile), random_body(6, n, profile=profile)
    assert a == b and a != c and len(a.ops) == n


@pytest.mark.parametrize("arch", ["h100", "b200"])
@pytest.mark.parametrize("n", [10, 20, 40, 80, 160])
def test_fa_bodies_are_solvable_on_the_builtin_archs(arch, n):
    """The sequential witness of every "fa" body passes the validator, joint and swp-only, so each
    benchmark size has a schedule on h100 and b200."""
    a = get_arch(arch)
    for seed in range(3):
        p = build_problem(random_body(seed, n), a)
        assert p.impossibilities() == []
        for swp_only in (False, True):
            assert validate(p, sequential_witness(p, swp_only=swp_only)) == []


def test_fa_bodies_look_like_flash_attention():
    """Loads are variable-latency streaming TMA copies with SMEM buffers, MMAs are asynchronous with
    register accumulators, the softmax ops are synchronous with registers; there are recurrences
    and blocking edges, and costs are in the hundreds of cycles."""
    body = random_body(11, 40)
    kinds = {op.kind for op in body.ops}
    loads = [op for op in body.ops if op.kind == "load"]
    mmas = [op for op in body.ops if op.kind.startswith("mma")]
    sync = [op for op in body.ops if not op.is_async]
    assert {"load", "mma_qk"} <= kinds and loads and mmas and sync
    assert all(op.variable_latency and op.streaming and op.smem_bytes and op.units() == ("tma",) for op in loads)
    assert all(op.is_async and op.regs and op.units() == ("tc",) for op in mmas)
    assert all(op.regs for op in sync)
    assert any(e.distance >= 1 for e in body.edges) and any(e.blocking for e in body.edges)
    assert 200 <= max(op.busy_cycles for op in body.ops) <= 1100


def test_tiny_bodies_are_tiny_and_solvable():
    """Tiny bodies have 1..6-cycle costs on tiny_arch's units and a valid sequential witness."""
    for seed in range(50):
        p = tiny_problem(seed, graph_size(seed))
        assert max(op.latency for op in p.ops) <= 6 and set(p.body.units()) <= {"tma", "tc", "alu"}
        assert validate(p, sequential_witness(p)) == []


def test_the_tiny_arch_is_loaded_like_any_arch():
    """Every number of tiny_arch carries its source, as the arch loader demands."""
    arch = tiny_arch(3)
    assert all("synthetic test arch" in fact.source for fact in arch.all_facts().values())


# -- the exhaustive reference ------------------------------------------------------------------
def test_exhaustive_search_rests_on_the_validator():
    """The exhaustive search hands its candidates to the validator, and every option it honours
    restricts it the way CP-SAT's does (here: the fixed split and no cross-iteration pipelining)."""
    p = tiny_problem(271, 5)
    stats = SearchStats()
    s = solve_exhaustive(p, SolveOptions(), stats=stats)
    assert stats.candidates >= 1 and stats.candidates - stats.rejected == 1 and validate(p, s) == []
    for restricted in (SolveOptions(fixed_groups=producer_consumer_split(p)), SolveOptions(single_stage=True)):
        e = solve_exhaustive(p, restricted)
        c = solve(p, replace(restricted, workers=1))
        assert e.ii == c.ii >= s.ii and validate(p, e) == []


def _pinnings(seed: int, p: Problem) -> tuple[SolveOptions, SolveOptions]:
    """Two groupings to pin on graph ``seed``: Triton's producer/consumer split, and op i in group
    (seed >> i) & 1, which puts dependent ops together as often as apart."""
    split = SolveOptions(fixed_groups=producer_consumer_split(p), time_limit=TIME_LIMIT)
    return split, replace(split, fixed_groups=tuple((op.name, (seed >> i) & 1) for i, op in enumerate(p.ops)))


def pinned_bound_windows(seeds: range) -> tuple[int, int, list[str]]:
    """(windows searched, windows where the exhaustive search meets the pinned bound, findings).

    Where pinned groups lift the static bound above the free one (``bounds.under_pinned_groups``), the
    exhaustive search under those pins must find no schedule from the free bound (which the backends'
    agreement checks) to one below the pinned bound. Under pins every backend starts from the pinned bound,
    so this window search, which trusts nothing but the validator, is the only thing that would notice the
    bound being too high."""
    searched, met, wrong = 0, 0, []
    for seed in seeds:
        p = tiny_problem(seed, graph_size(seed))
        for pinned in _pinnings(seed, p):
            try:
                free, bound = lower_bound(p, replace(pinned, fixed_groups=())), lower_bound(p, pinned)
            except InfeasibleError:
                continue
            if bound == free:
                continue
            searched += 1
            try:
                s = solve_exhaustive(p, pinned, ii_from=free, ii_to=bound - 1)
                wrong.append(f"seed {seed} pinned {pinned.fixed_groups}: a schedule at II {s.ii} below the pinned "
                             f"bound {bound}")
            except InfeasibleError as err:
                if err.reason != "search exhausted":
                    wrong.append(f"seed {seed}: window [{free}, {bound - 1}] not searched: {err}")
                    continue
            with contextlib.suppress(InfeasibleError):  # no schedule at the bound itself: a looser bound
                solve_exhaustive(p, pinned, ii_from=bound, ii_to=bound)
                met += 1
    return searched, met, wrong


def test_the_pinned_group_bound_never_passes_a_schedule():
    """On 200 tiny graphs under two pinnings each, no schedule lies between the free bound and the pinned
    one, and the pinned bound is met exactly often enough that a bound one cycle higher would fail here."""
    # given tiny graphs whose pinned bound exceeds the free one; when the exhaustive search tries each II
    # between them; then none has a schedule, and most pinned bounds have one at exactly that II
    searched, met, wrong = pinned_bound_windows(range(CI_GRAPHS))
    assert wrong == []
    assert searched >= 150 and met >= searched // 2


# -- the slow run ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_backends_agree_on_2000_graphs():
    """The slow differential run: seeds [SLOW_SEED, SLOW_SEED + SLOW_GRAPHS), 2..5 ops in turn,
    secondary objectives included, every finding collected (docs/benchmarks_notes.md records the
    last run). Time-outs are reported, not failed, as long as their proven bounds hold."""
    began, wrong, undecided = time.monotonic(), [], []
    for i, seed in enumerate(range(SLOW_SEED, SLOW_SEED + SLOW_GRAPHS)):
        found = check_graph(seed, graph_size(seed), secondary=True)
        for line in found.wrong + found.undecided:
            print(line, flush=True)
        wrong += found.wrong
        undecided += found.undecided
        cpsat.cache_clear()
        tiny_problem.cache_clear()
        if (i + 1) % 100 == 0:
            print(f"{i + 1} graphs, {len(wrong)} wrong answers, {len(undecided)} time-outs, "
                  f"{time.monotonic() - began:.0f}s", flush=True)
    print(f"{SLOW_GRAPHS} graphs from seed {SLOW_SEED}: {len(wrong)} wrong answers, {len(undecided)} time-outs, "
          f"{time.monotonic() - began:.0f}s")
    assert wrong == []


@pytest.mark.slow
def test_the_pinned_group_bound_never_passes_a_schedule_on_2000_graphs():
    """The pinned-bound window search on the slow run's 2000 graphs (docs/benchmarks_notes.md records it)."""
    searched, met, wrong = pinned_bound_windows(range(SLOW_SEED, SLOW_SEED + SLOW_GRAPHS))
    print(f"{searched} windows searched, the pinned bound met exactly on {met}, {len(wrong)} wrong")
    assert wrong == [] and searched >= 1500
