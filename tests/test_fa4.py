"""FA4's granularity and the hardware facts it needs (issue 20): the program's costs, blocking TMEM
loads, per-issuer MMA order, setmaxnreg per warpgroup, SMEM outside the loop and resident
accumulators, each checked in the model, the validator and (where small enough) z3."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from twill.arch.registry import get_arch
from twill.body_json import body_document, body_from_document
from twill.bounds import bound_and_reason, res_mii
from twill.errors import GraphError, TwillError
from twill.frontend.programs import load_program
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.options import SolveOptions, pin_groups
from twill.problem import build_problem
from twill.schedule import Group, Schedule, ScheduledOp
from twill.solver import solve
from twill.validate import validate

FA4_CTA = {"subtiles": 2, "block_m": 256}
FA4_GRAIN = {**FA4_CTA, "s_frags": 4, "split_p": 3, "emu": 0.125}


def fa(**params):
    arch = get_arch("b200")
    return build_problem(load_program("fa_fwd", arch, params), arch)


# -- the program ---------------------------------------------------------------------------------
def test_defaults_keep_the_tile_level_graph() -> None:
    """No FA4 parameter: the 28-op graph whose results docs/design.md §5 reports; Q (256 x 128 fp16) holds
    SMEM outside the loop, the O staging reuses its tile."""
    p = fa(**FA4_CTA)
    assert len(p.ops) == 28 and len(p.edges) == 46
    assert not any(op.waits for op in p.ops) and p.body.static_smem == 256 * 128 * 2
    assert res_mii(p)[0].work == 2064  # the MUFU, as before


@pytest.mark.parametrize("chunks", [1, 2, 8])
def test_fa4_granularity_costs(chunks: int) -> None:
    """Per-iteration unit work at FA4's granularity (../shared/research/fa4.md §6.1): the tensor
    cores bind (2048), the MUFU drops to 1808 with 12.5% of the exps emulated, the row max halves
    with 3-input max; the TMEM loads block their warps for their latency."""
    p = fa(**FA4_GRAIN, o_chunks=chunks)
    assert len(p.ops) == 2 + 2 * (8 + 2 * 4 + 2 * chunks)  # loads; per tile 8 + 2 per fragment + 2 per chunk
    work = {u: sum(op.work(u) for op in p.ops) for u in p.body.units()}
    assert work["tc"] == 2048 and work["mufu"] == 1808 and work["alu"] == 1472
    lds = p.op("lds0")
    assert lds.waits and p.hold("lds0") > lds.latency > lds.busy_cycles
    assert p.body.static_smem == 2 * 256 * 128 * 2  # Q and the O staging buffer, 64 KiB each


def test_resident_o_sets_the_storage_bound() -> None:
    """S_j lives from Q·K_j until P·V_j's second half has read P (>= 2446 cycles) and O_j is resident
    (II each): 128 x (2 x 2446 + 2 x II) <= 512 x II gives II >= 2446, the hand estimate of
    fa4.md §6.2, which the memory relaxation also proved on the prototype."""
    lb, why = bound_and_reason(fa(**FA4_GRAIN, o_chunks=2), SolveOptions())
    assert lb == 2446 and "tmem" in why


def test_granularity_parameters_are_checked() -> None:
    with pytest.raises(TwillError, match="s_frags"):
        fa(**FA4_CTA, o_chunks=2)
    with pytest.raises(TwillError, match="split_p"):
        fa(**{**FA4_GRAIN, "split_p": 5})
    with pytest.raises(TwillError, match="o_chunks"):
        fa(**{**FA4_GRAIN, "o_chunks": 3})


# -- blocking loads ------------------------------------------------------------------------------
def mk(problem, ii: int, placed: dict[str, tuple[int, int]], groups: dict[int, tuple[int, int]]) -> Schedule:
    """A hand-made schedule: op -> (start, group), group -> (warps, registers per thread)."""
    ops = tuple(ScheduledOp(id=n, name=problem.op(n).kind, unit=None, start=s, stage=s // ii, offset=s % ii, group=g)
                for n, (s, g) in placed.items())
    gs = tuple(Group(id=g, warps=w, regs_per_thread=r, role="test", ops=tuple(n for n, (_, x) in placed.items()
                                                                         if x == g)) for g, (w, r) in groups.items())
    return Schedule(program=problem.body.name, arch=problem.arch.name, status="feasible", ii=ii, ii_lower_bound=1,
                    length=ii, solve_seconds=0.0, ops=ops, groups=gs, buffers=(), body=problem.body)


def test_a_blocking_load_holds_its_group_for_its_latency() -> None:
    """tcgen05.ld + wait::ld: the port is busy 16 cycles, the warps wait 154; an op issued by the
    same group inside the wait breaks in-order issue, one issued after it does not."""
    arch = get_arch("b200")
    load = Op(name="ld", uses=(Use(unit="tmem", length=16),), latency=154, issuer=Issuer.WARPGROUP, regs=64,
              waits=True)
    mul = Op(name="mul", uses=(Use(unit="fp32", length=16),), latency=20, issuer=Issuer.WARPGROUP)
    p = build_problem(LoopBody("blk", (load, mul), ()), arch)
    assert p.hold("ld") == 154
    one = {0: (4, 88)}
    assert {v.rule for v in validate(p, mk(p, 400, {"ld": (0, 0), "mul": (100, 0)}, one))} == {"in_order_issue"}
    assert validate(p, mk(p, 400, {"ld": (0, 0), "mul": (154, 0)}, one)) == []
    with pytest.raises(GraphError, match="asynchronous"):
        Op(name="bad", latency=5, is_async=True, waits=True)


# -- per-issuer order ----------------------------------------------------------------------------
def test_cross_latency_applies_only_across_groups() -> None:
    """Two MMAs on one accumulator: the issuing thread's next MMA may follow after the K-steps
    (latency 384); another group must wait for the completion (cross_latency 520)."""
    arch = get_arch("b200")
    a = Op(name="a", uses=(Use(unit="tc", length=384),), latency=520, is_async=True, issuer=Issuer.THREAD)
    b = Op(name="b", uses=(Use(unit="tc", length=128),), latency=264, is_async=True, issuer=Issuer.THREAD)
    e = Edge(src="a", dst="b", latency=384, cross_latency=520, carrier=Carrier.TMEM)
    p = build_problem(LoopBody("mma2", (a, b), (e,)), arch)
    assert p.cross_group_cost(e) == 136
    assert validate(p, mk(p, 1000, {"a": (0, 0), "b": (384, 0)}, {0: (1, 24)})) == []
    two = mk(p, 1000, {"a": (0, 0), "b": (384, 1)}, {0: (1, 24), 1: (1, 24)})
    assert {v.rule for v in validate(p, two)} == {"dependence"}
    assert validate(p, mk(p, 1000, {"a": (0, 0), "b": (520, 1)}, {0: (1, 24), 1: (1, 24)})) == []
    with pytest.raises(GraphError, match="cross_latency"):
        Edge(src="a", dst="b", latency=384, cross_latency=100)


# -- setmaxnreg per warpgroup --------------------------------------------------------------------
def _narrow_pair(regs_a: int, regs_b: int, wide_regs: int) -> tuple:
    arch = get_arch("b200")
    t = Op(name="t", uses=(Use(unit="tma", length=10),), latency=50, is_async=True, issuer=Issuer.THREAD,
           smem_bytes=1024, variable_latency=True)
    m = Op(name="m", uses=(Use(unit="tc", length=64),), latency=200, is_async=True, issuer=Issuer.THREAD,
           tmem_cols=64)
    w = Op(name="w", uses=(Use(unit="fp32", length=64),), latency=68, issuer=Issuer.WARPGROUP, regs=128)
    body = LoopBody("narrow", (t, m, w), (Edge(src="t", dst="m", latency=50, blocking=True, carrier=Carrier.SMEM),
                                          Edge(src="m", dst="w", latency=200, blocking=True, carrier=Carrier.TMEM)))
    p = build_problem(body, arch)
    placed = {"t": (0, 0), "m": (50, 1), "w": (250, 2)}
    return p, mk(p, 400, placed, {0: (1, regs_a), 1: (1, regs_b), 2: (8, wide_regs)})


def test_narrow_groups_share_one_warpgroup_budget() -> None:
    """setmaxnreg is per warpgroup: a load warp and an MMA warp share one budget, and are charged
    as a whole warpgroup (4 x 32 x budget) in the register file."""
    p, ok = _narrow_pair(24, 24, 240)
    assert validate(p, ok) == []  # 8 x 32 x 240 + 4 x 32 x 24 = 61,440 + 3,072 <= 65,536
    _, full = _narrow_pair(24, 24, 248)  # per warp it would fit: 63,488 + 2 x 32 x 24 = 65,024
    assert [v.rule for v in validate(p, full)] == ["registers"]
    _, mixed = _narrow_pair(24, 32, 200)
    found = validate(p, mixed)
    assert [v.rule for v in found] == ["registers"] and "one setmaxnreg value" in found[0].message


def test_arch_without_the_fact_keeps_per_group_budgets() -> None:
    p, full = _narrow_pair(24, 32, 248)
    arch = replace(p.arch, limits={k: v for k, v in p.arch.limits.items() if k != "reg_alloc_group_warps"})
    assert arch.reg_alloc_warps() == 1
    assert validate(build_problem(p.body, arch), full) == []


@pytest.mark.parametrize("backend", ["cpsat", "z3"])
def test_solvers_pack_narrow_groups(backend: str) -> None:
    """Both backends give the pinned load and MMA warps one budget and charge a warpgroup for them."""
    p, _ = _narrow_pair(24, 24, 240)
    options = SolveOptions(workers=1, time_limit=30, fixed_groups=(("t", 0), ("m", 1), ("w", 2)))
    if backend == "z3":
        from twill.solver.z3_backend import solve_z3 as run
    else:
        run = solve
    s = run(p, options)
    assert validate(p, s) == []
    narrow = [g for g in s.groups if g.warps < 4]
    assert len(narrow) == 2 and len({g.regs_per_thread for g in narrow}) == 1
    wide = [g for g in s.groups if g.warps >= 4]
    assert s.objective_values["regs"] == 32 * (4 * narrow[0].regs_per_thread
                                                 + sum(g.warps * g.regs_per_thread for g in wide))


# -- SMEM outside the loop -----------------------------------------------------------------------
def test_static_smem_counts_against_the_rings() -> None:
    arch = get_arch("b200")
    t = Op(name="t", uses=(Use(unit="tma", length=10),), latency=50, is_async=True, issuer=Issuer.THREAD,
           smem_bytes=100_000, variable_latency=True, streaming=True)
    body = LoopBody("ring", (t,), (), static_smem=140_000)
    p = build_problem(body, arch)
    assert any("outside the loop" in r for r in p.impossibilities())
    p2 = build_problem(replace(body, static_smem=100_000), arch)
    s = mk(p2, 60, {"t": (0, 0)}, {0: (1, 24)})
    assert validate(p2, s) == []
    p3 = build_problem(replace(body, static_smem=140_000), arch)
    assert [v.rule for v in validate(p3, replace(s, body=p3.body))] == ["smem"]


def test_body_fields_survive_json() -> None:
    p = fa(**FA4_GRAIN, o_chunks=2)
    assert body_from_document(json.loads(json.dumps(body_document(p.body)))) == p.body


# -- pinning groups ------------------------------------------------------------------------------
def test_pin_groups_relabels_by_first_use() -> None:
    pinned = dict(pin_groups(["a", "b", "c"], "c;a,b"))
    assert pinned == {"a": 0, "b": 0, "c": 1}
    with pytest.raises(TwillError, match="matches 0 groups"):
        pin_groups(["a", "b"], "a")
    with pytest.raises(TwillError, match="matches no op"):
        pin_groups(["a"], "a;z*")


def test_fa4_roles_cover_every_op() -> None:
    import runpy

    roles = runpy.run_path("programs/fa_fwd.py")["FA4_ROLES"]
    p = fa(**FA4_GRAIN, o_chunks=8)
    groups = dict(pin_groups([op.name for op in p.ops], roles))
    assert len(set(groups.values())) == 5
    assert groups["qk0"] == groups["pv1b"] and groups["ldo0_0"] == groups["rst1_7"]
    assert groups["exc0_3"] != groups["exc1_3"]


# -- FA4's roles ---------------------------------------------------------------------------------
def _fa4_module() -> dict:
    import runpy
    from pathlib import Path

    return runpy.run_path(str(Path(__file__).resolve().parents[1] / "programs" / "fa_fwd.py"))


def _least_budget(problem, ops: set[str]) -> int:
    """The least setmaxnreg budget a group issuing ``ops`` can have in any schedule: at the issue
    of each op v, every value u of the group with a path u -> v and a reader reached from v is
    still live (dependence paths of distance 0 order issues within one iteration), plus v itself.
    Derived here from the graph alone, independently of the solver."""
    import networkx as nx

    g = nx.DiGraph((e.src, e.dst) for e in problem.edges if e.distance == 0)
    g.add_nodes_from(op.name for op in problem.ops)
    warps = max(problem.op(n).min_warps for n in ops)
    worst = 0
    for v in ops:
        before, after = nx.ancestors(g, v), nx.descendants(g, v) | {v}
        # u is read by an op reached from v (v itself reads u at issue, which frees registers)
        live = problem.op(v).regs + sum(problem.op(u).regs for u in ops & before
                                        if any(e.distance == 0 and e.dst in after - {v}
                                               for e in problem.body.out_edges(u)))
        worst = max(worst, live)
    reserved = problem.arch.limit("regs_reserved_per_thread")
    per_thread = reserved + -(-worst // (32 * warps))
    return -(-per_thread // 8) * 8


@pytest.mark.parametrize("chunks, fits", [(1, False), (2, True), (8, True)])
def test_whole_tile_correction_cannot_have_its_own_warpgroup(chunks: int, fits: bool) -> None:
    """Counter-test (o_chunks=1): a correction that loads a whole O tile holds 128 registers per
    thread, and with two softmax warpgroups that each keep S (128) and a P fragment (16) live, FA4's
    five roles need more than the 65,536 registers of the SM at every II; streamed in 2 or 8 chunks
    they fit (the pinned schedule below uses 192 / 88 / 192 + 32)."""
    fa4 = _fa4_module()
    p = fa(**FA4_GRAIN, o_chunks=chunks)
    groups = dict(pin_groups([op.name for op in p.ops], fa4["FA4_ROLES"]))
    members = {g: {n for n, x in groups.items() if x == g} for g in set(groups.values())}
    budgets = {g: _least_budget(p, ops) for g, ops in members.items()}
    narrow = max(b for g, b in budgets.items() if max(p.op(n).min_warps for n in members[g]) < 4)
    words = 32 * 4 * (narrow + sum(b for g, b in budgets.items() if max(p.op(n).min_warps for n in members[g]) >= 4))
    assert (words <= p.arch.limit("regs_per_sm")) == fits, (budgets, words)


def test_pinned_fa4_schedule_is_valid_and_has_the_five_roles() -> None:
    """The schedule bench/fa4_probe.py found with FA4's roles pinned (o_chunks=2, II 2650), checked
    against the current model by the independent validator: a change to the program, the arch
    or a rule that breaks it fails here."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "data" / "fa4_pinned_2650.json"
    s = Schedule.read(path)
    p = fa(**FA4_GRAIN, o_chunks=2)
    assert s.body == p.body
    assert validate(p, s) == []
    roles = _fa4_module()["fa4_roles"]({o.id: o.group for o in s.ops})
    assert roles == {"loads": True, "softmax": True, "off_path": True, "correction": True, "mma": True}
    assert s.ii == 2650 and len(s.groups) == 5


def test_free_groups_at_the_pinned_ii_fold_the_correction() -> None:
    """The free model at the pinned schedule's II, minimised from it (bench/fa4_fewer_groups.py), kept
    FA4's load warp, MMA warp and one softmax warpgroup per tile, and moved each tile's correction into
    the other tile's softmax warpgroup: 4 groups. Each merged warpgroup is busy 1487 + 654 of 2650 cycles.
    The file is re-validated against the current model, so a rule change that breaks it fails here."""
    from pathlib import Path

    s = Schedule.read(Path(__file__).resolve().parents[1] / "notebooks" / "data" / "fa4_free_2650.json")
    p = fa(**FA4_GRAIN, o_chunks=2)
    assert s.body == p.body and validate(p, s) == []
    groups = {o.id: o.group for o in s.ops}
    roles = _fa4_module()["fa4_roles"](groups)
    assert roles == {"loads": True, "softmax": True, "off_path": True, "correction": False, "mma": True}
    assert len(s.groups) == 4 and s.ii == 2650
    assert groups["ldo1_0"] == groups["lds0"] and groups["ldo0_0"] == groups["lds1"]
    busy = sorted(sum(p.hold(n) for n in g.ops) for g in s.groups)
    assert busy[-2:] == [2141, 2141] and busy[-1] <= s.ii


def test_cli_groups_takes_pairs_or_patterns() -> None:
    from twill.cli import _fixed_groups

    assert _fixed_groups("a=1,b=0", ["a", "b"]) == (("a", 1), ("b", 0))  # main's partial form, kept as given
    assert _fixed_groups("b;a", ["a", "b"]) == (("a", 0), ("b", 1))  # patterns: renumbered by first use
    with pytest.raises(TwillError, match="needs the program's ops"):
        _fixed_groups("a;b")
