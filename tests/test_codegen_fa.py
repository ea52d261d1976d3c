"""twill.codegen on FlashAttention forward (Hopper): register values carried across stages, RS
wgmma for P·V, tensor-core turns in windows that wrap the II, and the loop cut that keeps ptxas
from serializing the wgmma pipeline; compiled for sm_90a on a CPU as the GEMM kernels are."""

from __future__ import annotations

import copy
import functools
import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import H100_ISSUE8
from twill.codegen import CodegenError, generate
from twill.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ROOT / "bench" / "codegen"
# name -> (schedule file, how the tensor-core turn token is lowered: True = named barriers, the default)
KERNELS = {"opt": ("fa_opt", True), "noturn": ("fa_opt", False), "1stage": ("fa_1stage", True),
           "split": ("fa_split", True), "mbar": ("fa_opt", "mbarrier")}
FP_PIPES = re.compile(r"^(@!?P\d+\s+)?(FADD|FMUL|FFMA|FMNMX|MUFU|F2FP|SHFL)\b")  # SASS of register ops


def sched_of(name: str) -> Schedule:
    return Schedule.read(SCHEDULES / f"{KERNELS[name][0]}.json")


def gen_of(name: str):
    return generate(sched_of(name), turns=KERNELS[name][1])


def body(src: str, group: int) -> str:
    return src.split(f"def partition_g{group}(")[1].split("@gluon.jit")[0]


# ---- the plan and the source follow the schedule ------------------------------------------------
def test_optimum_lowers_to_a_loader_and_two_pingpong_consumers():
    sched = sched_of("opt")
    assert (sched.ii, sched.status) == (2048, "optimal")
    plan = gen_of("opt").plan
    assert sorted((p.group, p.warps, p.regs) for p in plan.partitions) == [(0, 1, 24), (1, 4, 192), (2, 4, 192)]
    # each consumer's tensor-core window is its P·V of iteration j then its Q·Kᵀ of iteration j + 1
    assert [(w.group, w.ops) for w in plan.windows] == [(1, ("pv0", "qk0")), (2, ("pv1", "qk1"))]
    assert [w.rounds for w in plan.windows] == [{"pv0": 0, "qk0": -1}, {"pv1": 0, "qk1": -1}]
    # every wgmma of a register group is retired in the loop step that issues it (the cut)
    for p in plan.partitions:
        for v, w in plan.waits.items():
            if v in p.ops:
                assert w.lag + p.stage[w.after] == p.stage[v] and p.ops.index(w.after) >= p.ops.index(v)
    g2 = next(p for p in plan.partitions if p.group == 2)
    assert g2.cut == sched.op(g2.ops[0]).offset > 0 and g2.depth == 1


def test_source_carries_values_across_the_stage_boundary():
    src = gen_of("opt").source
    g1 = body(src, 1)
    assert "o0 = warpgroup_mma(cast0, load_v_ring.index((t - 1) % 2), rescale0, is_async=True)" in g1  # RS P·V
    assert "warpgroup_mma(q_smem.slice(0, 64), load_k_ring.index((t) % 2).permute((1, 0)), s0, use_acc=False" in g1
    assert "max0_p1 = max0  # keep max0 of iteration t - 1" in g1  # alpha reads the previous max
    assert "alpha0 = gl.exp2(max0_p1 - max0)" in g1
    assert "o0, cast0, s0 = warpgroup_mma_wait(0, deps=(o0, cast0, s0,))" in g1  # P kept alive until P·V retires
    assert '"bar.sync 15, 256;' in g1 and '"bar.arrive 14, 256;' in g1  # the turn token on named barriers
    assert "q_row + 64" in body(src, 2)  # sub-tile 1 writes the second half of the Q tile's rows
    assert "launch(q, k, v, o, sm_scale)" in src


def test_no_turns_and_one_stage_differ_where_their_schedules_do():
    opt, noturn, one = gen_of("opt"), gen_of("noturn"), gen_of("1stage")
    assert noturn.plan.turns == [] and "turn.index" not in noturn.source and '"bar.' not in noturn.source
    assert noturn.plan.deferred == opt.plan.deferred  # rule 12 follows the schedule's windows, token or not
    assert re.sub(r"turn|#.*", "", opt.source) != re.sub(r"turn|#.*", "", noturn.source)
    assert one.plan.turns == [1, 2, 1, 2]  # Q·Kᵀ and P·V windows alternate between the consumers
    assert all(p.depth == 0 for p in one.plan.partitions)
    assert {r.op: r.copies for r in one.plan.rings.values()} == {"load_k": 1, "load_v": 1}
    assert "# prologue step" not in one.source and "# prologue step 0" in opt.source


def test_a_deeper_register_group_is_refused():
    raw = json.loads((SCHEDULES / "fa_opt.json").read_text(encoding="utf-8"))
    d = copy.deepcopy(raw)
    for o in d["ops"]:
        if o["id"] == "rowsum0":
            o["start"] += 2 * d["ii"]
            o["stage"], o["offset"] = divmod(o["start"], d["ii"])
    with pytest.raises(CodegenError, match="over 3 stages|breaks a rule"):
        generate(Schedule.from_dict(d))


# ---- compiled artifacts --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    pytest.importorskip("triton", minversion="3.6")
    from twill.codegen.compile import compile_generated

    out = {}
    for name in KERNELS:
        gen = gen_of(name)
        out[name] = (sched_of(name), gen, compile_generated(gen.source, gen.plan.frame, f"twill_test_fa_{name}"))
    return out


@pytest.mark.parametrize("name", list(KERNELS))
def test_compiled_fa_kernels_match_their_schedules(compiled, name):
    sched, gen, c = compiled[name]
    default = gen.plan.default
    assert c.num_warps == default.warps
    workers = sorted((g.warps, g.regs_per_thread) for g in sched.groups if g.id != default.group)
    assert sorted(zip(c.partition_warps, c.requested_regs, strict=True)) == workers
    assert (c.spill_stores, c.spill_loads) == (0, 0), c.ptxas_log
    assert "C7511" not in c.ptxas_log and "C7515" not in c.ptxas_log, c.ptxas_log  # wgmma not serialized
    rings = {op: int(dd) for op, dd in re.findall(r"%(\w+)_ring = ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x",
                                                   c.ttgir)}
    assert rings == {b.value: b.copies for b in sched.buffers if b.memory == "smem"}


def test_without_the_cut_ptxas_serializes_the_wgmmas(monkeypatch):
    """The counter-test of the loop cut: cut every body at offset 0 and consumer 2's P·V stays in
    flight across the back edge, which makes ptxas serialize every wgmma of the kernel (C7511)."""
    pytest.importorskip("triton", minversion="3.6")
    import twill.codegen.plan as plan_mod
    from twill.codegen.compile import compile_generated

    monkeypatch.setattr(plan_mod, "_cut", lambda *args: 0)
    gen = gen_of("opt")
    assert all(p.cut == 0 for p in gen.plan.partitions)
    c = compile_generated(gen.source, gen.plan.frame, "twill_test_fa_uncut")
    assert "C7511" in c.ptxas_log


# ---- rule 12 and the named-barrier token ---------------------------------------------------------
def loop_of(src: str, group: int) -> str:
    return body(src, group).split("for t in range(")[1].split("\n    # epilogue")[0]


def test_register_work_inside_a_window_follows_its_last_wgmma():
    """rowsum starts between a consumer's P·V and Q·Kᵀ issues in the schedule (offsets 664 < 1105 < 1176);
    nothing in the window reads it, so it is emitted after the window's last issue and turn pass, and the
    retire that issue triggers comes after it, still in the same step."""
    sched = sched_of("opt")
    plan = gen_of("opt").plan
    assert sched.op("pv0").offset < sched.op("rowsum0").offset < sched.op("qk0").offset
    assert plan.deferred == {"rowsum0": "qk0", "rowsum1": "qk1"}
    g1 = next(p for p in plan.partitions if p.group == 1)
    assert g1.ops == ("alpha0", "rescale0", "cast0", "pv0", "qk0", "rowsum0", "rowmax0", "max0", "exp0")
    loop = loop_of(gen_of("opt").source, 1)
    at = [loop.index(x) for x in ("o0 = warpgroup_mma(", "s0 = warpgroup_mma(", '"bar.arrive 14', "rowsum0 = ",
                                  "= warpgroup_mma_wait(", "rowmax0 = ")]
    assert at == sorted(at)
    # register ops that feed the window's wgmmas stay before them; single-wgmma windows defer nothing
    assert gen_of("1stage").plan.deferred == {} and gen_of("split").plan.deferred == {}


def test_named_barrier_turns_pass_exactly_once_per_round():
    """Named barriers count arrivals (no phases): each barrier must get one arrive per sync. Position k
    syncs on barrier 15 - k; the group before it arrives there once per round, the last position's group
    once more before its prologue (round -1, which the mbarrier form got from a fresh barrier's parity)."""
    for name, positions in (("opt", 2), ("1stage", 4)):
        gen = gen_of(name)
        plan = gen.plan
        assert [plan.turn_barrier(k)[0] for k in range(positions)] == [15 - k for k in range(positions)]
        for k, w in enumerate(plan.windows):
            before = plan.windows[k - 1]
            bar, threads = plan.turn_barrier(k)
            assert threads == 32 * 4 * 2  # both consumers have 4 warps
            loops = {g: loop_of(gen.source, g) for g in (1, 2)}
            assert loops[w.group].count(f'"bar.sync {bar}, {threads};') == 1
            assert loops[before.group].count(f'"bar.arrive {bar}, {threads};') == 1
        last = plan.windows[-1].group
        head = body(gen.source, last).split("# prologue")[0].split("for t in range(")[0]
        assert head.count(f'"bar.arrive {plan.turn_barrier(0)[0]}, ') == 1
        assert "bar." not in body(gen.source, plan.windows[0].group).split("# prologue")[0].split("for t in")[0]


def test_too_many_turns_for_the_named_barriers_are_refused(monkeypatch):
    import twill.codegen.plan as plan_mod

    monkeypatch.setattr(plan_mod, "NAMED_BARRIERS", 7)  # 4 turns would take ids 3..6, Triton's 0..3 meet them
    with pytest.raises(CodegenError, match="named barriers 3..6, which meet Triton's own"):
        gen_of("1stage")
    assert generate(sched_of("1stage"), turns="mbarrier").plan.turn_kind == "mbarrier"
    with pytest.raises(CodegenError, match="unknown turn lowering"):
        generate(sched_of("opt"), turns="semaphore")


def test_named_barrier_ids_stay_clear_of_tritons(compiled):
    """Triton gives its partitions named barriers 0, 1 and 2 + i; the token's ids are all above them."""
    for name in ("opt", "1stage"):
        _, gen, c = compiled[name]
        ours = {int(b) for b in re.findall(r"bar\.(?:sync|arrive) (\d+), \d+;", c.ptx)}
        assert ours == {gen.plan.turn_barrier(k)[0] for k in range(len(gen.plan.windows))}
        theirs = {int(b) for b in re.findall(r"(?:bar\.sync|barrier\.sync)\s+(\d+)(?:, \d+)?;", c.ptx)} - ours
        assert theirs and max(theirs) < min(ours) and max(theirs) <= len(gen.plan.partitions)
    _, mb, c = compiled["mbar"]
    assert mb.plan.turn_kind == "mbarrier" and not re.search(r"bar\.(sync|arrive) 1[0-5],", c.ptx)


def test_the_window_first_wgmma_goes_out_back_to_back(compiled):
    """What rule 12 is for, read in the SASS: in each consumer's steady loop the P·V wgmma (RS: A from
    registers, the first of its window) is 8 HGMMAs with no register-op instruction between them."""
    from twill.codegen.compile import disassemble, loop_wgmmas

    for name in ("opt", "mbar", "noturn"):
        loops = loop_wgmmas(disassemble(compiled[name][2].cubin))
        assert len(loops) == 2, name  # the two consumers' loops (the loader has no wgmma)
        for wgmmas in loops:
            pv = [g for g in wgmmas if re.search(r"HGMMA\S* R\d+, R\d+, gdesc", g[0])]
            assert len(pv) == 1 and sum("HGMMA" in t for t in pv[0]) == 8
            assert not [t for t in pv[0] if FP_PIPES.match(t)], (name, pv[0])


def test_without_rule_12_ptxas_spreads_the_row_sum_through_the_pv_issue(monkeypatch):
    """The counter-test: keep rowsum between the two issues (the schedule's order) and ptxas puts its
    FADDs among the P·V HGMMAs in both consumer loops."""
    pytest.importorskip("triton", minversion="3.6")
    import twill.codegen.plan as plan_mod
    from twill.codegen.compile import compile_generated, disassemble, loop_wgmmas

    monkeypatch.setattr(plan_mod, "_defer_window_work", lambda *args: {})
    gen = gen_of("opt")
    assert gen.plan.deferred == {} and "pv0', 'rowsum0', 'qk0" in repr(gen.plan.partitions)
    c = compile_generated(gen.source, gen.plan.frame, "twill_test_fa_nodefer")
    for wgmmas in loop_wgmmas(disassemble(c.cubin)):
        pv = next(g for g in wgmmas if re.search(r"HGMMA\S* R\d+, R\d+, gdesc", g[0]))
        assert sum(1 for t in pv if t.startswith("FADD")) >= 16


# ---- register hand-offs --------------------------------------------------------------------------
HANDOFF = ROOT / "bench" / "results" / "h200" / "handoff" / "fa_handoff.json"  # the variant's schedule the H200 ran


@functools.cache
def handoff_arch() -> str:
    """The arch ``fa_handoff.json`` was solved on: the warpgroup-rate variant as it was before hand-off copies
    were charged as hold (design.md §2.7), i.e. without its SMEM rate. The schedule is the one the H200 ran
    (bench/results/h200/handoff); on today's variant its casts' stores overlap the row sums
    (tests/test_handoff_hold.py)."""
    text = (SCHEDULES / "h200_warpgroup_rates.toml").read_text(encoding="utf-8")
    kept = [line for line in text.splitlines() if not line.startswith("smem_bytes_per_clk_beside_wgmma")]
    path = Path(tempfile.mkdtemp(prefix="twill_test_")) / "h200_warpgroup_rates_before_copies.toml"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return str(path)


def test_register_values_read_in_another_group_go_through_smem_slots():
    """``fa_handoff.json`` (II 2445 on h200_warpgroup_rates.toml): groups 1 and 3 compute the softmax of
    one sub-tile each and hand P (fp16, 16 KiB) and alpha (a row vector) to group 2, which issues both
    P·V; the row sums stay where they are computed, so the output write in group 2 reads their last
    values across groups too. Each value gets the depth of its schedule buffer ``src->dst``."""
    sched = Schedule.read(HANDOFF)
    plan = generate(sched, arch=handoff_arch()).plan
    assert {h.op: (h.group, h.readers, h.reader_groups, h.copies) for h in plan.handoffs.values()} == {
        "cast0": (1, ("pv0",), (2,), 1), "alpha0": (1, ("rescale0",), (2,), 1),
        "cast1": (3, ("pv1",), (2,), 1), "alpha1": (3, ("rescale1",), (2,), 1)}
    # P·V takes P as its A operand straight from the slot (SS wgmma); alpha is loaded into registers
    assert {h.op: h.operand for h in plan.handoffs.values()} == {"cast0": ("pv0",), "alpha0": (), "cast1": ("pv1",),
                                                                 "alpha1": ()}
    assert plan.handoffs["cast0"].slot_bytes == 64 * 128 * 2 and plan.handoffs["alpha0"].slot_bytes == 64 * 4
    assert [(f.op, f.group, f.reader_group) for f in plan.finals] == [("rowsum0", 1, 2), ("rowsum1", 3, 2)]
    rings = sum(r.copies * r.slot_bytes for r in plan.rings.values())
    hands = sum(h.copies * (h.slot_bytes + 16) for h in plan.handoffs.values()) + 2 * (64 * 4 + 8)
    assert plan.smem_bytes == rings + hands + 128 * 128 * 2 + 8 + 8 * (2 + 2 + 2 + 2)  # + Q, its barrier, 2 channels
    # P·V's round is its iteration + 1 and it has the lowest stage of group 2: round 0 is taken empty up front
    assert [(w.group, w.ops, w.rounds) for w in plan.windows] == [
        (1, ("qk0",), {"qk0": 0}), (2, ("pv0",), {"pv0": 1}), (3, ("qk1",), {"qk1": 0}), (2, ("pv1",), {"pv1": 1})]


def test_hand_off_source_waits_stores_publishes_and_releases():
    src = generate(Schedule.read(HANDOFF), arch=handoff_arch()).source
    g1, g2 = loop_of(src, 1), loop_of(src, 2)

    def in_order(text: str, lines: list[str]) -> bool:
        at = [text.index(x, text.index(lines[0])) for x in lines]
        return at == sorted(at)

    # the producer, right after the cast: slot free, store, fence (a wgmma reads it), barrier, publish
    assert in_order(g1, ["cast0 = gl.convert_layout", "mbarrier.wait(cast0_hand_empty.index(0), (((t - 1) // 1) & 1) ^ 1)",
                         "cast0_hand.index(0).store(cast0)", "fence_async_shared()", "gl.thread_barrier()",
                         "mbarrier.arrive(cast0_hand_full.index(0))"])
    # P·V waits for P before its tensor-core turn, reads it in place, and frees the slot once retired
    assert in_order(g2, ["mbarrier.wait(cast0_hand_full.index(0), ((t) // 1) & 1)", '"bar.sync 14',
                         "o0 = warpgroup_mma(cast0_hand.index(0), load_v_ring.index((t) % 2), rescale0, is_async=True)",
                         "o0 = warpgroup_mma_wait(0, deps=(o0,))", "mbarrier.arrive(cast0_hand_empty.index(0))"])
    # alpha is loaded into the row layout of Q·Kᵀ's accumulator, then its slot is freed at once
    assert in_order(g2, ["mbarrier.wait(alpha0_hand_full.index(0), ((t) // 1) & 1)",
                         "alpha0 = alpha0_hand.index(0).load(gl.SliceLayout(1, s0_layout))", "gl.thread_barrier()",
                         "mbarrier.arrive(alpha0_hand_empty.index(0))", "rescale0 = o0 * "])
    assert "fence_async_shared()" not in g1.split("alpha0_hand.index(0).store(alpha0)")[1].split("mbarrier.arrive")[0]
    # P·V0(-1) would open round 0 of its window, and group 2's prologue starts at P·V0(0): taken empty up front
    head = body(src, 2).split("# prologue step 0")[0]
    assert "no wgmma of pv0 this time" in head and "(round 0, named barrier)" in head
    assert "s0_layout: gl.constexpr" in body(src, 2)  # declared over group 2's warps for alpha0
    assert "o0_layout: gl.constexpr" in body(src, 1)  # the producer casts P into P·V's operand layout
    tail = body(src, 2).split("# epilogue step")[-1]
    assert tail.index("mbarrier.wait(rowsum0_final_bar.index(0), 0)") < tail.index("1.0 / rowsum0_last")
    assert "rowsum0_final.index(0).store(rowsum0)" in body(src, 1).split("# epilogue step")[-1]


def test_a_hand_off_the_schedule_gives_too_few_slots_is_refused():
    """The slot of iteration j is free again when its reader has loaded it; a reader due one II later than
    the schedule's (distance 1) would need a second slot, which the schedule's buffer does not have."""
    from dataclasses import replace

    import twill.codegen.plan as plan_mod
    from twill.validate import problem_for

    sched = Schedule.read(HANDOFF)
    problem = problem_for(sched)
    edge = next(e for e in problem.edges if (e.src, e.dst) == ("cast0", "pv0"))
    plan_mod._check_slots(sched, problem, "cast0", [edge], 1)  # the schedule's own timing: one slot
    with pytest.raises(CodegenError, match="needs 2 SMEM slots; the schedule gives it 1"):
        plan_mod._check_slots(sched, problem, "cast0", [replace(edge, distance=1)], 1)


def test_a_wgmma_accumulator_read_in_another_group_is_refused():
    """The plan itself refuses it (the validator would too, on this mutation's timing): the accumulator
    would have to be retired before its store, and no rule of the emitter places that retire."""
    from twill.codegen.plan import make_plan
    from twill.validate import problem_for

    d = json.loads(HANDOFF.read_text(encoding="utf-8"))
    for g in d["groups"]:  # Q·Kᵀ0 moves to group 3, its row max stays in group 1
        if g["id"] in (1, 3):
            g["ops"] = [o for o in g["ops"] if o != "qk0"] + (["qk0"] if g["id"] == 3 else [])
    for o in d["ops"]:
        if o["id"] == "qk0":
            o["group"] = 3
    sched = Schedule.from_dict(d)
    with pytest.raises(CodegenError, match="qk0 \\(a wgmma\\) is read in group 1; only register ops' values"):
        make_plan(sched, problem_for(sched))


def test_the_hand_off_kernel_compiles_and_fits_without_spills():
    """Compiled for sm_90a; at the schedule's budgets ptxas spills, and ``--fit-registers`` gives every
    register-holding group 8 more (group 2 at 160, group 3 at 136). That kernel passed its checks on the H200
    (bench/results/h200/handoff/fa_handoff_ss.py)."""
    pytest.importorskip("triton", minversion="3.6")
    from twill.codegen.fit import fit_registers

    fitted = fit_registers(Schedule.read(HANDOFF), arch=handoff_arch())
    assert fitted.spilled[0] > 0 and fitted.raised == {1: 8, 2: 8, 3: 8}
    c = fitted.compiled
    assert (c.spill_stores, c.spill_loads) == (0, 0) and c.requested_regs == (24, 160, 136)
    assert "C7511" not in c.ptxas_log and "C7515" not in c.ptxas_log


def test_fit_registers_raises_one_group_where_all_together_overflow_the_file():
    """The default main job's schedule (one 128-row tile on h100, II 2439 optimal: an 8-warp group hands P and
    alpha to a 4-warp P·V group; bench/results/h200/handoff/fa_onetile_h100.json) spills at its budgets; 8 more for
    both groups overflows the register file (8 x 168 + 4 x 160 + 4 x 24 words per lane), so the fit raises one
    group at a time: group 2 to 160 is enough. That kernel passed its checks on the H200. (Solved on the
    issue-8 H100 model, tests/archs/h100_issue8.toml, which charged the hand-off no copy.)"""
    pytest.importorskip("triton", minversion="3.6")
    from twill.codegen.fit import fit_registers

    sched = Schedule.read(ROOT / "bench" / "results" / "h200" / "handoff" / "fa_onetile_h100.json")
    sched = replace(sched, arch="h100-issue8", arch_path=H100_ISSUE8)  # the model it was solved on
    assert (sched.ii, sched.status, [g.warps for g in sched.groups]) == (2439, "optimal", [4, 8, 4])
    fitted = fit_registers(sched)
    assert fitted.spilled[0] > 0 and fitted.raised == {2: 8}
    assert (fitted.compiled.spill_stores, fitted.compiled.requested_regs) == (0, (24, 160))
    assert "register budgets raised (group 2 +8)" in fitted.generated.source.splitlines()[0]


def test_without_the_rounds_before_the_first_the_hand_off_kernel_deadlocks(monkeypatch):
    """The counter-test of ``_rounds_before_first``: nobody takes round 0 of P·V0's window, so Q·Kᵀ1's group
    waits for a pass that never comes (the turn protocol's exploration finds it at one KV block)."""
    import twill.codegen.emit as E

    monkeypatch.setattr(E, "_rounds_before_first", lambda b: None)
    with pytest.raises(CodegenError, match=r"trip count 1\): deadlock"):
        generate(Schedule.read(HANDOFF), arch=handoff_arch())


HANDOFF_COPY = SCHEDULES / "fa_handoff_copy.json"  # the same grouping's optimum once hand-off copies are charged


def test_a_window_of_smaller_shift_takes_the_rounds_past_its_last_iteration():
    """``fa_handoff_copy.json`` (II 2383, optimal for the hand-off grouping on the warpgroup-rate variant): P·V0's
    round is its iteration + 2 and P·V1's + 1, so the token's path runs to round n + 1; Q·Kᵀ1's group has one stage
    and its iterations reach round n only, so after its epilogue it takes round n + 1 empty. The kernel passed its
    checks on the H200 (bench/results/h200/handoff_copy)."""
    gen = generate(Schedule.read(HANDOFF_COPY))
    assert [(w.group, w.ops, w.rounds) for w in gen.plan.windows] == [
        (3, ("qk1",), {"qk1": 0}), (2, ("pv0",), {"pv0": 2}), (1, ("qk0",), {"qk0": 0}), (2, ("pv1",), {"pv1": 1})]
    tail = body(gen.source, 3).split("# epilogue")[1]
    assert "an empty turn (round n_iter + 1)" in tail
    assert "round n_iter + 1" not in body(gen.source, 1)


def test_without_the_rounds_past_the_end_that_kernel_deadlocks(monkeypatch):
    """The counter-test of ``_rounds_past_the_end``: P·V0 of the last iteration waits for a round that Q·Kᵀ1's
    group never passes (the turn protocol's exploration finds it at one KV block)."""
    import twill.codegen.emit as E

    monkeypatch.setattr(E, "_rounds_past_the_end", lambda b, stages: None)
    with pytest.raises(CodegenError, match=r"trip count 1\): deadlock: group 2 .* round 2 of window 1"):
        generate(Schedule.read(HANDOFF_COPY))


def test_the_main_jobs_schedule_retires_before_its_loop_what_the_steady_state_holds_retired(monkeypatch):
    """Today's main job (`twill solve fa_fwd --arch h100`, one 128-row tile, II 2439 optimal; stored as
    bench/codegen/fa_onetile_h100.json): its prologue leaves Q·Kᵀ of iteration 0 in flight, and the steady state's top
    holds it retired, so the loop body neither retires nor releases it. The emitter retires it and frees its K slot
    before the loop (session 70); without that the kernel would enter the loop typed in flight, which Gluon rejects."""
    import twill.codegen.emit as E
    from twill.codegen import generate
    from twill.codegen.replay import replay

    sched = Schedule.read(ROOT / "bench" / "codegen" / "fa_onetile_h100.json")
    assert (sched.arch, sched.ii, sched.status) == ("h100", 2439, "optimal")
    gen = generate(sched)
    head = gen.source[gen.source.index("def partition_g1("):gen.source.index("    for t in range(")]
    retire = head.index("s0 = warpgroup_mma_wait(0, deps=(s0,))  # retire qk0 before the loop")
    assert head.index("mbarrier.arrive(ch0_empty.index((0) % 2))", retire) > retire
    assert replay(gen.source, gen.plan, gen.plan.problem).cycles_per_iteration <= sched.ii
    monkeypatch.setattr(E, "_retire_before_loop", lambda b, entry, steady: False)
    with pytest.raises(CodegenError, match=r"group 1 enters its loop with \['s0'\] in flight"):
        generate(sched)
