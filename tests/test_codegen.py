"""twill.codegen: the lowering plan read off schedules, the legality check, mutations, and the
compiled artifacts of the three GEMM schedules (Triton 3.6 compiles Gluon for sm_90a on a CPU)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from tests.conftest import H100_ISSUE8
from twill.cli import main
from twill.codegen import CodegenError, generate
from twill.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ROOT / "bench" / "codegen"
THREE = ("swp", "ws1", "ws2")
KERNELS = THREE + ("ws2sub", "ws1sub")  # ws2sub: producer + two 4-warp consumers taking tensor-core turns;
# ws1sub: producer + one 4-warp group issuing two sub-tile MMAs


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # schedules name their arch file relative to the repository root


def raw(name: str) -> dict:
    return json.loads((SCHEDULES / f"gemm_{name}.json").read_text(encoding="utf-8"))


def mutated(name: str, change) -> Schedule:
    d = copy.deepcopy(raw(name))
    change(d)
    return Schedule.from_dict(d)


def set_op(d: dict, op: str, **kw) -> None:
    for o in d["ops"]:
        if o["id"] == op:
            o.update(kw)
            if "start" in kw:
                o["stage"], o["offset"] = divmod(kw["start"], d["ii"])


def set_copies(d: dict, copies: dict[str, int]) -> None:
    for b in d["buffers"]:
        if b["value"] in copies:
            b["bytes"] = b["bytes"] // b["copies"] * copies[b["value"]]
            b["copies"] = copies[b["value"]]


# ---- the plan follows the schedule ----------------------------------------------------------------
@pytest.mark.parametrize("name", KERNELS + ("swp_isolated", "ws1_isolated", "ws2_isolated", "ws2sub_isolated"))
def test_plan_reads_every_structural_fact_off_the_schedule(name):
    sched = Schedule.read(SCHEDULES / f"gemm_{name}.json")
    plan = generate(sched).plan
    assert sorted((p.group, p.warps, p.regs) for p in plan.partitions) == \
        sorted((g.id, g.warps, g.regs_per_thread) for g in sched.groups)
    for p in plan.partitions:
        assert set(p.ops) == set(next(g.ops for g in sched.groups if g.id == p.group))
        offsets = [sched.op(o).offset for o in p.ops]
        assert offsets == sorted(offsets)  # issue order is the schedule's offset order
        low = min(sched.op(o).stage for o in p.ops)
        assert p.stage == {o: sched.op(o).stage - low for o in p.ops}
    for b in sched.buffers:
        if b.memory == "smem":
            assert plan.rings[b.value].copies == b.copies
    for ch in plan.channels:
        assert ch.cross == any(sched.group_of(r) != ch.producer for r in ch.readers)
        assert ch.expect_bytes == sum(sched.body.op(r.op).smem_bytes for r in ch.rings)
    default = plan.default
    assert default.warps % 4 == 0 and any(op in plan.mmas for op in default.ops)


def _next_in_group(sched: Schedule, plan, op: str) -> tuple[str, int]:
    """The group's next wgmma issue after ``op`` (op, iteration shift)."""
    v = sched.op(op)
    nxt = min((u.start + d * sched.ii, u.offset, u.id, d) for u in sched.ops for d in range(-6, 7)
              if u.id in plan.mmas and u.group == v.group and u.start + d * sched.ii > v.start)
    return nxt[2], nxt[3]


@pytest.mark.parametrize("suffix", ["", "_isolated", "_feed", "_same_tile"])
def test_wait_depth_comes_from_latency_over_ii(suffix):
    """k = the group's wgmma issues that fall inside an MMA's latency; the wait sits after the k-th.
    With one MMA per group and latency > II that is wait(1) after the next iteration's issue; with
    none inside (latency <= II), the retire is deferred behind the group's next wgmma, wait(1)
    there, never a wait(0) that would hold the warps for the whole latency."""
    for path in sorted(SCHEDULES.glob(f"gemm_*{suffix}.json")):
        sched = Schedule.read(path)
        plan = generate(sched).plan
        for op, w in plan.waits.items():
            v, lat = sched.op(op), sched.body.op(op).latency
            later = sorted((u.start + d * sched.ii, u.id, d) for u in sched.ops for d in range(-4, 5)
                           if u.id in plan.mmas and u.group == v.group and v.start < u.start + d * sched.ii < v.start + lat)
            if later:
                assert (w.depth, w.after, w.lag, w.deferred) == (len(later), later[-1][1], later[-1][2], False)
            else:
                assert (w.depth, (w.after, w.lag), w.deferred) == (1, _next_in_group(sched, plan, op), True)


def test_a_retire_is_not_deferred_past_a_reader_of_its_registers():
    """FlashAttention's Q·Kᵀ result is read by the softmax in its own group: the wgmma retires
    where the result is due (FA's kernels keep the eager retires: none deferred)."""
    for name in ("fa_opt", "fa_split", "fa_1stage"):
        plan = generate(Schedule.read(SCHEDULES / f"{name}.json")).plan
        assert plan.waits and not any(w.deferred for w in plan.waits.values())


def test_a_deferred_retire_releases_the_slot_one_iteration_later():
    """At II 672 > latency 571 the consumer keeps one wgmma in flight: wait(1) after the next
    iteration's issue, then the slot of iteration t - 1 goes back to the producer."""
    src = generate(Schedule.read(SCHEDULES / "gemm_ws1.json")).source
    retires = [ln for ln in src.splitlines() if "# retire mma:" in ln]
    assert retires and all("warpgroup_mma_wait(1," in ln and "behind the group's next wgmma" in ln for ln in retires)
    assert "mbarrier.arrive(ch0_empty.index((t - 1) % 5), pred=t - 1 >= 0)" in src


def test_groups_sharing_the_tensor_cores_take_turns_in_start_order():
    sched = Schedule.read(SCHEDULES / "gemm_ws2sub_same_tile.json")
    gen = generate(sched)
    starts = {sched.op(op).group: sched.op(op).start for op in gen.plan.mmas}
    assert gen.plan.turns == sorted(starts, key=starts.get) == [1, 2]
    # the token on hardware named barriers (the default): position k syncs on barrier 15 - k with the
    # threads of its group and of the group before it; the last position passes round -1 at its start
    assert gen.plan.turn_kind == "named"
    assert [gen.plan.turn_barrier(k) for k in (0, 1)] == [(15, 256), (14, 256)]
    g1, g2 = (gen.source.split(f"def partition_g{g}(")[1].split("@gluon.jit")[0] for g in (1, 2))
    loop1, loop2 = (b.split("for t in range(")[1] for b in (g1, g2))
    assert loop1.count('"bar.sync 15, 256;') == 1 and loop1.count('"bar.arrive 14, 256;') == 1
    assert loop2.count('"bar.sync 14, 256;') == 1 and loop2.count('"bar.arrive 15, 256;') == 1
    assert g2.split("for t in range(")[0].count('"bar.arrive 15, 256;') == 1  # round -1, before the loop
    assert "bar." not in g1.split("for t in range(")[0]
    assert loop1.index("bar.sync") < loop1.index("acc0 = warpgroup_mma(") < loop1.index("bar.arrive")
    assert "turn.index" not in gen.source and "turn = " not in gen.source  # no SMEM for the token
    # the same order on an mbarrier array (turns='mbarrier', the earlier lowering)
    mb = generate(sched, turns="mbarrier")
    assert mb.plan.turn_kind == "mbarrier" and "bar.sync 1" not in mb.source
    assert "mbarrier.wait(turn.index(0), ((t) & 1) ^ 1)" in mb.source  # first group: the previous round's pass
    assert "mbarrier.wait(turn.index(1), (t) & 1)" in mb.source
    assert mb.source.count("mbarrier.arrive(turn.index(") == 2
    assert ".slice(64, 64)" in gen.source  # mma1 reads the second half of the A slot
    single = generate(Schedule.read(SCHEDULES / "gemm_ws2.json"))
    assert single.plan.turns == [] and single.plan.turn_kind is None
    assert not any(x in single.source for x in ("turn.index", "turn = ", "turn_tok", '"bar.'))


def test_swapping_the_consumers_swaps_the_turn_order():
    def swap(d):  # mma0 (first on the tensor cores) moves to group 2, mma1 to group 1
        set_op(d, "mma0", group=2)
        set_op(d, "mma1", group=1)
        d["groups"][1]["ops"], d["groups"][2]["ops"] = ["mma1"], ["mma0"]

    gen = generate(mutated("ws2sub_same_tile", swap))
    assert gen.plan.turns == [2, 1]
    body = gen.source.split("def partition_g2")[1].split("@gluon.jit")[0]
    assert '"bar.sync 15, 256;' in body and ".slice(0, 64)" in body  # group 2 now holds position 0
    assert '"bar.arrive 15, 256;' in gen.source.split("def partition_g1")[1].split("for t in")[0]
    mb = generate(mutated("ws2sub_same_tile", swap), turns="mbarrier").source.split("def partition_g2")[1].split("@gluon.jit")[0]
    assert "mbarrier.wait(turn.index(0), ((t) & 1) ^ 1)" in mb


@pytest.mark.parametrize("name", KERNELS)
def test_each_reader_group_releases_each_slot_once_per_iteration(name):
    gen = generate(Schedule.read(SCHEDULES / f"gemm_{name}.json"))
    for p in gen.plan.partitions:
        body = gen.source.split(f"def partition_g{p.group}(")[1].split("@gluon.jit")[0]
        loop = body.split("for t in range(")[1].split("\n    #")[0].split("\n    acc")[0]
        for ch in gen.plan.channels:
            arrivals = loop.count(f"mbarrier.arrive({ch.name}_empty")
            assert arrivals == (1 if ch.cross and any(r in p.ops for r in ch.readers) else 0), (p.group, ch.name)


def test_an_accumulator_retired_in_the_next_iteration_enters_the_loop_as_async():
    gen = generate(Schedule.read(SCHEDULES / "gemm_ws1sub_same_tile.json"))
    w0, w1 = gen.plan.waits["mma0"], gen.plan.waits["mma1"]
    assert (w0.after, w0.lag, w1.after, w1.lag) == ("mma1", 1, "mma0", 0)
    assert "acc0 = warpgroup_mma_init(acc0)" in gen.source and "acc1 = warpgroup_mma_init" not in gen.source


def test_cli_groups_flag_checks_its_input(capsys):
    assert main(["solve", "gemm", "--arch", "h200", "--groups", "nope=1", "-q"]) == 2
    assert "not ops of gemm" in capsys.readouterr().err
    assert main(["solve", "gemm", "--arch", "h200", "--groups", "mma=x", "-q"]) == 2
    assert "OP=GROUP" in capsys.readouterr().err


def test_source_names_the_schedule_facts():
    src = generate(Schedule.read(SCHEDULES / "gemm_ws2_isolated.json")).source
    assert "gl.warp_specialize([(partition_g1, args), (partition_g0, args)], [1], [24])" in src
    assert "ring of load_a: buffer load_a: copies 2" in src
    assert "mbarrier.init(ch0_empty.index(i), count=1)" in src
    assert "warpgroup_mma_wait(1, deps=(acc,))  # retire mma: 1 later wgmma issue(s)" in src
    assert "expect-tx 49152 B = load_a 16384 B + load_b 32768 B" in src
    for line in src.splitlines():  # every barrier, ring, TMA and wgmma construct says where it came from
        if re.search(r"mbarrier\.(wait|arrive|expect)|async_copy_global|warpgroup_mma\(|_ring = ", line):
            assert "#" in line, line


# ---- mutations change the code or are refused ---------------------------------------------------------
# These read the schedules solved with an isolated load's TMA latency (bench/codegen/*_isolated.json):
# their shallow rings leave room to deepen them, and their facts do not move when archs/h200.toml does.
def test_mutating_a_stage_changes_the_peeling():
    base = generate(Schedule.read(SCHEDULES / "gemm_swp_isolated.json"))
    later = generate(mutated("swp_isolated", lambda d: set_op(d, "mma", start=d["ops"][2]["start"] + d["ii"])))
    assert base.plan.partitions[0].depth == 1 and later.plan.partitions[0].depth == 2
    assert "for t in range(1, n_iter)" in base.source and "for t in range(2, n_iter)" in later.source
    assert "# prologue step 1" in later.source and "# prologue step 1" not in base.source
    assert {k: r.copies for k, r in later.plan.rings.items()} == {"load_a": 4, "load_b": 3}  # longer lifetimes


def test_mutating_ring_depths_changes_the_rings():
    def deeper(d):
        set_op(d, "mma", start=d["ops"][2]["start"] + d["ii"])
        set_copies(d, {"load_a": 4, "load_b": 3})

    src = generate(mutated("ws1_isolated", deeper)).source
    base = generate(Schedule.read(SCHEDULES / "gemm_ws1_isolated.json")).source
    assert "[4, 128, 64]" in src and "[3, 128, 64]" in src and "[2, 128, 64]" not in src
    assert "[3, 128, 64]" in base and "[2, 128, 64]" in base and "[4, 128, 64]" not in base


def test_a_ring_depth_the_schedule_does_not_support_is_refused():
    with pytest.raises(CodegenError, match="buffers"):
        generate(mutated("ws2_isolated", lambda d: set_copies(d, {"load_a": 3, "load_b": 3})))


def test_mutating_groups_changes_the_partitions():
    def relabel(d):  # the consumer becomes group 0, the producer group 1
        set_op(d, "mma", group=0)
        set_op(d, "load_a", group=1)
        set_op(d, "load_b", group=1)
        g0, g1 = d["groups"]
        g0.update(ops=["mma"], warps=8, regs_per_thread=152, role="mma")
        g1.update(ops=["load_a", "load_b"], warps=1, regs_per_thread=24, role="load")

    src = generate(mutated("ws2", relabel)).source
    assert "gl.warp_specialize([(partition_g0, args), (partition_g1, args)], [1], [24])" in src
    two = generate(mutated("ws1", lambda d: d["groups"][0].update(warps=2))).source
    assert "[(partition_g1, args), (partition_g0, args)], [2], [24])" in two


@pytest.mark.parametrize("change, why", [
    (lambda d: d["groups"][1].update(warps=2), "needs 4 warps"),
    (lambda d: d["groups"][0].update(regs_per_thread=28), "registers"),
    (lambda d: set_op(d, "load_b", group=1), "variable|group"),
])
def test_the_legality_check_refuses(change, why):
    with pytest.raises(CodegenError, match=why):
        generate(mutated("ws1", change))


def test_wgmma_group_of_two_warps_is_refused_by_codegen_itself():
    from twill.codegen.plan import make_plan
    from twill.validate import problem_for

    sched = mutated("swp", lambda d: d["groups"][0].update(warps=2))
    with pytest.raises(CodegenError, match="multiple of 4 warps"):
        make_plan(sched, problem_for(sched))


def test_smem_over_capacity_is_refused():
    from twill.codegen.plan import make_plan
    from twill.validate import problem_for

    sched = mutated("ws2", lambda d: set_copies(d, {"load_a": 4, "load_b": 4}))
    with pytest.raises(CodegenError, match="SMEM"):
        make_plan(sched, problem_for(sched))


def test_cli_refuses_with_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["solve", "gemm", "--arch", H100_ISSUE8, "--swp-only", "-q", "--workers", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["codegen", str(out), "-o", str(tmp_path / "k.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "accumulator of mma needs 256 registers" in err[0]
    assert not (tmp_path / "k.py").exists()


@pytest.mark.parametrize("name", KERNELS)
def test_the_gemm_body_declares_the_staging_its_frame_allocates(name):
    """The solver sizes the rings in what the body leaves of SMEM (static_smem); the emitter allocates the
    frame's staging beside them. The two are written in different layers (programs/gemm.py, frames.py), so
    this checks they agree: otherwise the solver plans rings no CTA holds (issue 21: 4 + 4 at 128x256)."""
    from twill.codegen.frames import frame_for

    sched = Schedule.read(SCHEDULES / f"gemm_{name}.json")
    frame = frame_for(sched.program, dict(sched.body.params))
    assert sched.body.static_smem == sum(bytes_ for *_, bytes_ in frame.staging()) > 0


def test_a_tma_box_that_is_not_a_power_of_two_is_refused(tmp_path, capsys):
    """192-column tiles solve, but Triton's tensor descriptors refuse the box at launch: codegen says so
    in one line instead of writing a kernel that fails when it runs (found on the H200, issue 21)."""
    out = tmp_path / "s.json"
    assert main(["solve", "gemm", "--arch", "h200", "-p", "block_n=192", "--max-warps", "5", "-q", "--workers", "1",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["codegen", str(out), "-o", str(tmp_path / "k.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["twill: error: codegen: the TMA box of load_b is 192 x 64; Triton's tensor descriptors need "
                   "power-of-2 sides"]
    assert not (tmp_path / "k.py").exists()


def test_a_blackwell_schedule_is_refused(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["solve", "gemm", "--arch", "b200", "-q", "--workers", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["codegen", str(out), "-o", str(tmp_path / "k.py")]) == 2
    assert "lowers Hopper" in capsys.readouterr().err


def test_cli_writes_the_kernel(tmp_path, capsys):
    assert main(["codegen", str(SCHEDULES / "gemm_ws1.json"), "-o", str(tmp_path / "k.py")]) == 0
    assert "2 partition(s)" in capsys.readouterr().out
    assert "def launch(a, b, c):" in (tmp_path / "k.py").read_text()


def test_cli_turn_lowering_flags(tmp_path):
    ws2sub = str(SCHEDULES / "gemm_ws2sub.json")
    outs = {}
    for flags in ([], ["--turns", "mbarrier"], ["--no-turns"]):
        path = tmp_path / f"k{len(outs)}.py"
        assert main(["codegen", ws2sub, "-o", str(path), *flags]) == 0
        outs[" ".join(flags)] = path.read_text()
    assert '"bar.sync 15, 256;' in outs[""] and "turn.index" not in outs[""]
    assert "mbarrier.wait(turn.index(0)" in outs["--turns mbarrier"] and '"bar.' not in outs["--turns mbarrier"]
    assert "turn.index" not in outs["--no-turns"] and '"bar.' not in outs["--no-turns"]


def test_register_grant_replays_allocate_warp_groups():
    from twill.codegen.regs import grant

    g = grant(8, (1,), (24,))  # 8-warp default + 1-warp worker padded to a warpgroup: 12 warps
    assert (g.maxnreg, g.default, g.workers, g.total_warps) == (168, 240, (24,), 12)
    g = grant(4, (4, 1), (192, 24), maxnreg=136)  # the dossier's FA example: default exactly 192
    assert (g.default, g.workers) == (192, (192, 24))


# ---- no program-specific constants outside the frame -------------------------------------------------
def test_emitter_has_no_program_specific_constants():
    pkg = ROOT / "twill" / "codegen"
    banned = re.compile(r"load_a|load_b|\bgemm\b|block_[mnk]|a_desc|b_desc|c_desc|['\"]acc['\"]|\b(64|128|256)\b"
                        r"|float16|fp16")  # op kinds ("load", "mma") are twill.ops kinds, shared by all programs
    for path in sorted(pkg.glob("*.py")):
        if path.name in ("frames.py", "regs.py"):  # the documented frame; regs.py: setmaxnreg's 256 cap
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if '"""' in line or line.strip().startswith(("#", '"')):
                continue
            assert not banned.search(code), f"{path.name}:{i}: {line.strip()}"


# ---- compiled artifacts (needs triton 3.6, which the test extra installs) ------------------------
def _facts_of_schedule(sched: Schedule) -> dict:
    p = sched.body.params
    tc = [g for g in sched.groups if any(sched.body.op(o).kind == "mma" for o in g.ops)]
    default = min(tc, key=lambda g: (-g.warps, g.id))
    workers = sorted((g.warps, g.regs_per_thread) for g in sched.groups if g is not default)
    rings = {b.value: b.copies for b in sched.buffers if b.memory == "smem"}
    return {"tile": (p["block_m"], p["block_n"], p["block_k"]), "default_warps": default.warps,
            "workers": workers, "rings": rings or None}


def _facts_of_artifacts(c, plan) -> dict:
    specs = list(plan.mmas.values())
    tile = (sum(x.acc_shape[0] for x in specs), specs[0].acc_shape[1], plan.rings["load_a"].spec.block[1])
    rings = {op: {int(d)} for op, d in
             re.findall(r"%(\w+)_ring = ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x", c.ttgir)}
    return {"tile": tile, "default_warps": c.num_warps,
            "workers": sorted(zip(c.partition_warps, c.requested_regs, strict=True)), "rings": rings}


@pytest.fixture(scope="module")
def compiled():
    pytest.importorskip("triton", minversion="3.6")
    from twill.codegen.compile import compile_generated

    out = {}
    for name in KERNELS:
        sched = Schedule.read(ROOT / "bench" / "codegen" / f"gemm_{name}.json")
        gen = generate(sched)
        out[name] = (sched, gen, compile_generated(gen.source, gen.plan.frame, f"twill_test_{name}"))
    return out


@pytest.mark.parametrize("name", KERNELS)
def test_compiled_partitions_and_registers_equal_the_schedule(compiled, name):
    sched, gen, c = compiled[name]
    assert c.cubin and "ttg.target = \"cuda:90\"" in c.ttgir
    facts = _facts_of_schedule(sched)
    got = _facts_of_artifacts(c, gen.plan)
    assert got["tile"] == facts["tile"]
    assert got["default_warps"] == facts["default_warps"]
    assert got["workers"] == facts["workers"]  # worker warps and requestedRegisters = the schedule's
    if facts["rings"]:
        assert {k: {v} for k, v in facts["rings"].items()} == got["rings"]
    grant = gen.plan.grant
    if grant is None:
        assert c.setmaxnreg == ()
    else:  # PTX setmaxnreg: each worker at its budget, the default at the replayed leftover (>= its budget)
        assert {*grant.workers, grant.default} <= set(c.setmaxnreg)
        assert grant.default >= gen.plan.default.regs
    assert (c.spill_stores, c.spill_loads) == (0, 0), c.ptxas_log
    assert c.registers > 0


def test_the_kernels_differ_exactly_where_their_schedules_differ(compiled):
    facts = {n: _facts_of_schedule(compiled[n][0]) for n in KERNELS}
    arts = {n: _facts_of_artifacts(compiled[n][2], compiled[n][1].plan) for n in KERNELS}
    for a in KERNELS:
        for b in KERNELS:
            for key in ("tile", "default_warps", "workers"):
                assert (facts[a][key] == facts[b][key]) == (arts[a][key] == arts[b][key]), (a, b, key)
    plan_rings = {n: {k: {r.copies} for k, r in compiled[n][1].plan.rings.items()} for n in KERNELS}
    for a in KERNELS:
        for b in KERNELS:
            assert (plan_rings[a] == plan_rings[b]) == (arts[a]["rings"] == arts[b]["rings"]), (a, b)


def test_fit_registers_raises_the_budgets_where_ptxas_spills_and_only_there():
    """``twill codegen --fit-registers`` (``codegen.fit``): FA3's order on the H200 (``fa_variants/fa_opt2.json``)
    spills at its schedule's 224 registers per consumer; with both consumers at 240, which the register file holds,
    ptxas spills nothing (on the GPU that kernel runs 601 TFLOP/s against 535 at 224; docs/benchmarks_notes.md,
    session 62). fa_opt, which does not spill, keeps its schedule's budgets."""
    pytest.importorskip("triton", minversion="3.6")
    from twill.codegen.fit import fit_registers

    fitted = fit_registers(Schedule.read(ROOT / "bench" / "results" / "h200" / "fa_variants" / "fa_opt2.json"))
    assert fitted.spilled[0] > 0 and fitted.raised_by == 16
    c = fitted.compiled
    assert (c.spill_stores, c.spill_loads) == (0, 0) and c.requested_regs == (24, 240)
    assert [g.regs_per_thread for g in fitted.generated.plan.schedule.groups] == [24, 240, 240]
    assert "register budgets 16 above the schedule's" in fitted.generated.source.splitlines()[0]
    kept = fit_registers(Schedule.read(ROOT / "bench" / "codegen" / "fa_opt.json"))
    assert (kept.raised_by, kept.spilled, kept.compiled.requested_regs) == (0, (0, 0), (24, 192))
