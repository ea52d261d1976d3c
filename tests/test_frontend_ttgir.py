"""The Triton front end: checked-in TTGIR of the example kernels becomes the hand-written loop bodies
(issue 17). Fixtures come from triton 3.6.0 and 3.9.0 (examples/triton/make_fixtures.py), so these
tests need no triton."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from twill.arch.registry import get_arch
from twill.body_json import body_document, read_body, write_body
from twill.bounds import compute_bounds
from twill.cli import main
from twill.errors import GraphError
from twill.frontend.programs import load_program
from twill.frontend.ttgir import import_ttgir
from twill.options import SolveOptions
from twill.problem import build_problem
from twill.solver import solve

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "examples" / "triton" / "ttgir"
VERSIONS = ("triton-3.6.0", "triton-3.9.0")
CAPABILITY = {"h100": 90, "b200": 100}
VALUES = {"n_ctx": 8192, "M": 8192, "N": 8192, "K": 8192}


def fixture(version: str, kernel: str, arch: str) -> Path:
    return FIXTURES / version / f"{kernel}.sm{CAPABILITY[arch]}.ttgir"


def imported(version: str, kernel: str, arch: str):
    return import_ttgir(fixture(version, kernel, arch).read_text(), get_arch(arch), name=kernel, values=VALUES)


def bounds(body, arch: str):
    return compute_bounds(build_problem(body, get_arch(arch)))


# -- the four kernels import on both archs, with the hand-counted work ----------------------------
# FLOPs: 2 m n k per dot. FA: QK^T and PV, each 128 x 128 x 128. GEMMs: one 128 x 256 x 64 dot.
# Bytes: the tiles loaded per iteration. FA: K and V, 128 x 128 fp16 each. GEMMs: A 128 x 64 and
# B 256 x 64 (or 64 x 256) fp16. Trip counts: FA n_ctx / BLOCK_N = 8192 / 128; GEMMs cdiv(K, 64).
HAND = {
    "fa_fwd": (2 * 2 * 128 * 128 * 128, 2 * 128 * 128 * 2, 64),
    "gemm_tma": (2 * 128 * 256 * 64, (128 * 64 + 256 * 64) * 2, 128),
    "gemm_persistent": (2 * 128 * 256 * 64, (128 * 64 + 256 * 64) * 2, 128),
    "gemm_ptr": (2 * 128 * 256 * 64, (128 * 64 + 64 * 256) * 2, 128),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arch", ["h100", "b200"])
@pytest.mark.parametrize("kernel", sorted(HAND))
def test_flops_bytes_and_trips_match_the_kernel_source(version, arch, kernel):
    """Per-iteration tensor-core FLOPs, loaded bytes and the trip count equal the hand count."""
    # given
    flops, nbytes, trips = HAND[kernel]
    # when
    loop = imported(version, kernel, arch)
    # then
    assert (loop.flops, loop.load_bytes, loop.body.trip_count) == (flops, nbytes, trips)
    assert loop.body.params["flops_per_iteration"] == flops
    mmas = [op for op in loop.body.ops if op.kind == "mma"]
    loads = [op for op in loop.body.ops if op.kind == "load"]
    assert len(loads) == 2 and sum(op.smem_bytes for op in loads) == nbytes
    assert len(mmas) == (2 if kernel == "fa_fwd" else 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_pointer_loads_run_on_the_load_store_units(version):
    """tt.load of a pointer tile is priced on the arch's lsu unit, not on TMA and not for free."""
    # when
    body = imported(version, "gemm_ptr", "h100").body
    # then
    loads = [op for op in body.ops if op.kind == "load"]
    assert [u.unit for op in loads for u in op.uses] == ["lsu", "lsu"]
    # 16384 B and 32768 B at 120.8 B/clk (archs/h100.toml lsu_bytes_per_clk), ready an L2 hit (263) later
    assert [(op.uses[0].length, op.latency) for op in loads] == [(136, 136 + 263), (272, 272 + 263)]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arch", ["h100", "b200"])
def test_persistent_gemm_is_read_before_loop_fusion(version, arch):
    """Triton flattens the persistent loops (scf.if in the body); twill takes the K loop before that,
    and on sm_100 reads its registers -> TMEM -> registers accumulator round trip as HoistTMEMAlloc
    leaves it: the same loop as the TMA GEMM."""
    # when
    loop = imported(version, "gemm_persistent", arch)
    gemm = imported(version, "gemm_tma", arch)
    # then
    assert loop.before_pass == "TritonGPUFuseNestedLoops"
    assert sorted(op.kind for op in loop.body.ops) == ["load", "load", "mma"]
    chain = [e for e in loop.body.edges if e.src == e.dst]
    assert len(chain) == 1 and chain[0].in_place and chain[0].distance == 1
    assert chain[0].latency == next(op for op in loop.body.ops if op.kind == "mma").busy_cycles
    assert (bounds(loop.body, arch).res_mii, bounds(loop.body, arch).rec_mii) == (
        bounds(gemm.body, arch).res_mii, bounds(gemm.body, arch).rec_mii)


# -- FA forward and the TMA GEMM are the hand-written programs -----------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arch,kernel,program,res_mii,rec_mii", [
    ("h100", "fa_fwd", "fa_fwd", 2048, 1228), ("b200", "fa_fwd", "fa_fwd", 1032, 1191),
    ("h100", "gemm_tma", "gemm", 1160, 1024), ("b200", "gemm_tma", "gemm", 548, 512),
])
def test_bounds_match_the_hand_written_program(version, arch, kernel, program, res_mii, rec_mii):
    """ResMII and RecMII of the imported loop equal those of programs/<program>.py on the arch."""
    # given
    hand = bounds(load_program(program, get_arch(arch)), arch)
    # when
    got = bounds(imported(version, kernel, arch).body, arch)
    # then
    assert (got.res_mii, got.rec_mii) == (hand.res_mii, hand.rec_mii) == (res_mii, rec_mii)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arch,kernel,program", [
    ("h100", "fa_fwd", "fa_fwd"), ("b200", "fa_fwd", "fa_fwd"), ("h100", "gemm_tma", "gemm"), ("b200", "gemm_tma", "gemm"),
])
def test_pure_modulo_ii_matches_the_hand_written_program(version, arch, kernel, program):
    """The optimal software-pipelining-only II of the imported loop equals the hand program's."""
    # given
    options = SolveOptions(swp_only=True, workers=1, time_limit=60)
    a = get_arch(arch)
    # when
    hand = solve(build_problem(load_program(program, a), a), options)
    got = solve(build_problem(imported(version, kernel, arch).body, a), options)
    # then
    assert got.status == hand.status == "optimal"
    assert got.ii == hand.ii


def test_fa_edges_carry_the_hardware_flags():
    """Loads feed MMAs through SMEM with a wait; the O accumulator chain is in place on Blackwell."""
    # when
    body = imported("triton-3.9.0", "fa_fwd", "b200").body
    edges = {(e.src, e.dst, e.distance): e for e in body.edges}
    # then
    load_k = edges[("load_k", "mma_s_19", 0)]
    assert load_k.blocking and load_k.carrier.value == "smem"
    assert edges[("mma_acc_39", "tmem_ld_acc_32", 1)].blocking  # O is read back one iteration later
    store_o = edges[("tmem_st_acc_38", "mma_acc_39", 0)]
    assert store_o.in_place and store_o.carrier.value == "tmem"
    assert edges[("tmem_ld_s_20", "mma_s_19", 1)].carrier.value == "order"  # S's columns read before reuse


def test_names_and_refs_point_at_the_kernel_source():
    """Op names come from the Python variables, refs from the TTGIR op and its source line."""
    # when
    body = imported("triton-3.9.0", "fa_fwd", "h100").body
    # then
    assert {"load_k", "load_v", "exp_p"} <= {op.name for op in body.ops}
    exp_p = body.op("exp_p")
    assert exp_p.ref == "arith.mulf arith.subf math.exp2 (kernels.py:27)"
    assert {u.unit for u in exp_p.uses} == {"fp32", "mufu"}  # one FFMA + one MUFU.EX2 per element


# -- dump streams, graph files, the CLI ------------------------------------------------------------
def test_dump_stream_picks_the_module_before_pipelining():
    """From a stream of snapshots, the one printed before TritonGPUAssignLatencies is read."""
    # given
    module = fixture("triton-3.6.0", "gemm_tma", "h100").read_text().split("\n", 1)[1]
    pipelined = module.replace("ttng.warp_group_dot", "ttng.warp_group_dot_wait")
    stream = "\n".join([
        "// -----// IR Dump Before TritonGPUFuseNestedLoops (x) ('builtin.module' operation) //----- //", pipelined,
        "// -----// IR Dump Before TritonGPUAssignLatencies (x) ('builtin.module' operation) //----- //", module,
        "// -----// IR Dump Before TritonGPUPipeline (x) ('builtin.module' operation) //----- //", pipelined])
    # when
    loop = import_ttgir(stream, get_arch("h100"), values=VALUES)
    # then
    assert loop.before_pass == "TritonGPUAssignLatencies" and len(loop.body.ops) == 3


def test_graph_file_round_trips_in_the_schedule_format(tmp_path):
    """``twill import`` writes the twill.body/1 document a schedule embeds, and reads it back equal."""
    # given
    body = imported("triton-3.6.0", "fa_fwd", "b200").body
    path = tmp_path / "fa.json"
    # when
    write_body(body, path)
    back = read_body(path)
    # then
    assert back == body
    assert json.loads(json.dumps(body_document(body))) == json.loads(json.dumps(body_document(body)))


def test_cli_import_then_show(tmp_path, capsys):
    """``twill import X.ttgir --out g.json`` saves the graph; ``twill show g.json`` prints its bounds."""
    # given
    out = tmp_path / "g.json"
    src = fixture("triton-3.6.0", "fa_fwd", "h100")
    # when
    rc_import = main(["import", str(src), "--arch", "h100", "--out", str(out)])
    rc_show = main(["show", str(out), "--arch", "h100"])
    # then
    printed = capsys.readouterr().out
    assert rc_import == rc_show == 0
    assert "flops_per_iteration: 8388608" in printed
    assert "ResMII = 2048   RecMII = 1228   MII = 2048" in printed


# -- refusals: one line, exit 2, the op and where it is ---------------------------------------------
def _mutate(kernel: str, old: str, new: str, count: int = 1) -> str:
    text = fixture("triton-3.9.0", kernel, "h100").read_text()
    assert old in text
    return text.replace(old, new, count)


def _loop_line(text: str, pattern: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if re.search(pattern, line))


def _with_line_after(kernel: str, pattern: str, extra: str) -> str:
    lines = fixture("triton-3.9.0", kernel, "h100").read_text().splitlines()
    at = _loop_line("\n".join(lines), pattern)
    return "\n".join([*lines[:at], extra, *lines[at:]])


NO_DOT = """module {
  tt.func public @k(%n: i32) {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %x = scf.for %i = %c0 to %n step %c1 iter_args(%a = %c0) -> (i32) : i32 {
      %b = arith.addi %a, %c1 : i32
      scf.yield %b : i32
    }
    tt.return
  }
}
"""

REFUSALS = {
    "control flow in the body": (
        lambda: _with_line_after("gemm_tma", r"ttng\.warp_group_dot", "      scf.if %true {\n      }"),
        r"TTGIR line \d+: scf\.if inside the loop body"),
    "no loop with a dot": (lambda: NO_DOT, r"no scf\.for loop with a dot"),
    "op with no mapping": (
        lambda: _mutate("fa_fwd", "arith.mulf %acc", "arith.remf %acc"),
        r"kernels\.py:30: arith\.remf .* has no mapping to a twill op"),
    "dump without a pre-pipeline module": (
        lambda: "// -----// IR Dump Before TritonGPUPipeline (x) ('builtin.module' operation) //----- //\nmodule {\n}\n",
        r"no module printed before TritonGPUAssignLatencies, TritonGPUFuseNestedLoops"),
    "an already pipelined loop": (
        lambda: _with_line_after("gemm_tma", r"ttng\.warp_group_dot", "      ttng.wait_barrier %x, %y : !ttg.memdesc<1xi64>"),
        r"ttng\.wait_barrier in the loop body: this module is already software-pipelined"),
    "a dot on fp32 operands": (
        lambda: _mutate("gemm_tma", "!ttg.memdesc<128x64xf16, #shared, #smem>", "!ttg.memdesc<128x64xf32, #shared, #smem>", 99),
        r"kernels\.py:71: ttng\.warp_group_dot on f32 operands"),
    "a layout conversion through shared memory": (
        lambda: _mutate("fa_fwd", "ttg.convert_layout %acc_24 : tensor<128x128xf16, #mma> -> tensor<128x128xf16, "
                        "#ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 2}>>",
                        "ttg.convert_layout %acc_24 : tensor<128x128xf16, #mma> -> tensor<128x128xf16, #blocked>"),
        r"kernels\.py:32: ttg\.convert_layout .* moves data between threads"),
    "a region left open": (lambda: NO_DOT.rsplit("}", 2)[0], r"TTGIR line \d+: the text ends inside a region"),
    "a tile dimension beyond reason": (
        lambda: _mutate("gemm_tma", "tensor<128x64xf16", "tensor<" + "9" * 5000 + "x64xf16"),
        r"TTGIR: a tensor dimension in '9+' is too large to be a tile size"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_unsupported_ttgir_is_one_line_exit_2(case, tmp_path, capsys):
    """Each construct twill cannot model is refused with one line naming the op and its location."""
    # given
    make_text, expected = REFUSALS[case]
    path = tmp_path / "bad.ttgir"
    path.write_text(make_text())
    # when
    rc = main(["show", str(path), "--arch", "h100"])
    # then
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(expected, err), err


def test_a_kernel_without_launch_is_refused(capsys):
    """``file.py:kernel`` needs a launch description; the message says which flag."""
    # when
    rc = main(["show", str(ROOT / "examples" / "triton" / "kernels.py") + ":attn_fwd", "--arch", "h100"])
    # then
    err = capsys.readouterr().err
    assert rc == 2 and "needs --launch LAUNCH.toml" in err and len(err.strip().splitlines()) == 1


def test_import_refusal_raises_graph_error():
    """The library raises GraphError (the CLI's exit 2) for a module with no loop."""
    with pytest.raises(GraphError, match="no scf.for loop with a dot"):
        import_ttgir(NO_DOT, get_arch("h100"))


def test_compile_through_the_triton_extra(tmp_path):
    """With ``twill[triton]`` installed, ``kernel.py:name`` compiles and imports like its fixture."""
    # given
    pytest.importorskip("triton")
    arch = get_arch("h100")
    kernels = ROOT / "examples" / "triton"
    # when
    body = load_program(f"{kernels / 'kernels.py'}:matmul_tma", arch, launch=str(kernels / "gemm_tma.toml"))
    # then
    assert body.params["flops_per_iteration"] == 2 * 128 * 256 * 64
    assert body.trip_count == 128
    assert (bounds(body, "h100").res_mii, bounds(body, "h100").rec_mii) == (1160, 1024)


@pytest.mark.parametrize("arch,capability", [("h100", 90), ("h200", 90), ("b200", 100)])
def test_each_arch_names_its_triton_target(arch, capability):
    """The compile target comes from the arch's triton_target fact, not from its name."""
    from twill.frontend.triton_compile import capability_for

    assert capability_for(get_arch(arch)) == capability


def test_a_ttgir_file_takes_its_sizes_from_the_launch(capsys, tmp_path):
    """With --launch, a .ttgir file's trip count follows from the launch's values (cdiv(8192, 64));
    a launch file with an unknown key is one line and exit 2."""
    # given
    launch = ROOT / "examples" / "triton" / "gemm_tma.toml"
    bad = tmp_path / "bad.toml"
    bad.write_text("bogus = 1\n" + launch.read_text())
    src = fixture("triton-3.9.0", "gemm_tma", "h100")
    # when
    body = load_program(str(src), get_arch("h100"), launch=str(launch))
    rc = main(["show", str(src), "--arch", "h100", "--launch", str(bad)])
    # then
    assert body.trip_count == 128
    err = capsys.readouterr().err
    assert rc == 2 and "unknown keys ['bogus']" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_joint_solve_of_the_triton_fa_kernel(capsys):
    """``twill solve kernels.py:attn_fwd --launch fa_fwd.toml --arch h100`` solves jointly and validates."""
    # given
    pytest.importorskip("triton")
    kernels = ROOT / "examples" / "triton"
    argv = ["solve", f"{kernels / 'kernels.py'}:attn_fwd", "--launch", str(kernels / "fa_fwd.toml"), "--arch", "h100",
            "--time-limit", "120", "--workers", "1", "-q"]
    # when
    rc = main(argv)
    # then
    out = capsys.readouterr().out
    assert rc == 0  # the CLI fails (exit 2) when the validator rejects the schedule it found
    assert "validator: the schedule passes every check" in out
    ii = int(re.search(r"II = (\d+) cycles \((optimal|feasible)\)", out).group(1))
    assert ii >= 2048  # the tensor-core bound


def test_a_descriptor_store_in_the_loop_is_a_tma_store():
    """tt.descriptor_store inside the loop becomes a TMA store of the stored tile's bytes."""
    # given
    text = _with_line_after("gemm_tma", r"ttng\.warp_group_dot",
                            "      tt.descriptor_store %c_desc[%offs_m_0, %a], %a_4 : !tt.tensordesc<128x64xf16, "
                            "#shared>, tensor<128x64xf16, #blocked>")
    h100 = get_arch("h100")
    # when
    body = import_ttgir(text, h100, values=VALUES).body
    # then
    store = next(op for op in body.ops if op.kind == "store")
    assert store.uses[0].unit == "tma" and store.uses[0].length == h100.cost.tma(128 * 64 * 2).busy
    assert any(e.src == "load_a_4" and e.dst == store.name and e.carrier.value == "smem" for e in body.edges)
    # the A and B panels at the H100's GEMM feed (387 + 773) and the store at the same-tile rate (136) outrun the
    # 1024 tensor-core cycles
    assert bounds(body, "h100").res_mii == 1296


@pytest.mark.parametrize("version", VERSIONS)
def test_fa_ops_cost_what_the_hand_written_ops_cost(version):
    """On H100 each imported FA op that has a twin in programs/fa_fwd.py holds the same units for the
    same cycles and has the same latency (the arch prices both)."""
    # given
    h100 = get_arch("h100")
    hand = {op.name: op for op in load_program("fa_fwd", h100).ops}
    twins = {"load_k": "load_k", "load_v": "load_v", "mma_s": "qk0", "red_m_new": "rowmax0", "exp_p": "exp0",
             "red_l_new": "rowsum0", "ew_acc": "rescale0", "cvt_acc": "cast0", "mma_acc": "pv0"}
    # when
    ops = imported(version, "fa_fwd", "h100").body.ops
    # then
    for op in ops:
        twin = next((hand[t] for prefix, t in twins.items() if op.name == prefix or op.name.startswith(prefix + "_")),
                    None)
        if twin is None:
            continue
        assert (sorted((u.unit, u.length) for u in op.uses), op.latency) == (
            sorted((u.unit, u.length) for u in twin.uses), twin.latency), (op.name, twin.name)
    assert len([op for op in ops if any(op.name.startswith(p) for p in twins)]) == 9


def test_a_failed_compile_is_one_line(capsys, tmp_path):
    """A kernel the file does not define fails in the compile subprocess; twill prints its one line."""
    # given
    pytest.importorskip("triton")
    launch = tmp_path / "launch.toml"
    launch.write_text("[signature]\nx = \"i32\"\n")
    # when
    rc = main(["show", f"{ROOT / 'examples' / 'triton' / 'kernels.py'}:no_such_kernel", "--launch", str(launch),
               "--arch", "b200"])
    # then
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "defines no kernel named 'no_such_kernel'" in err
