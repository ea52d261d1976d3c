"""twill.codegen on FlashAttention forward (Hopper): register values carried across stages, RS
wgmma for P·V, tensor-core turns in windows that wrap the II, and the loop cut that keeps ptxas
from serializing the wgmma pipeline; compiled for sm_90a on a CPU as the GEMM kernels are."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from twill.codegen import CodegenError, generate
from twill.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ROOT / "bench" / "codegen"
# name -> (schedule file, tensor-core turns kept)
KERNELS = {"opt": ("fa_opt", True), "noturn": ("fa_opt", False), "1stage": ("fa_1stage", True),
           "split": ("fa_split", True)}


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
    assert "mbarrier.wait(turn.index(0), ((t - 1) & 1) ^ 1)" in g1 and "mbarrier.arrive(turn.index(1))" in g1
    assert "q_row + 64" in body(src, 2)  # sub-tile 1 writes the second half of the Q tile's rows
    assert "launch(q, k, v, o, sm_scale)" in src


def test_no_turns_and_one_stage_differ_where_their_schedules_do():
    opt, noturn, one = gen_of("opt"), gen_of("noturn"), gen_of("1stage")
    assert noturn.plan.turns == [] and "turn.index" not in noturn.source
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
