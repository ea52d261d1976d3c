"""twill sweep: the grid, the content-keyed cache, the engines agreeing, interruption, the CLI.

The sweeps here run the GEMM main loop on the issue-8 H100 model (tests/archs/h100_issue8.toml), whose
points prove optimal in ~0.1 s each, so the engines can be compared on exact answers. Expected IIs come from the model: a 64x64 tile is
bound by TMA (158 cycles for its A and B tiles), larger ones by the accumulator recurrence
(one MMA's tensor-core time: 256 cycles per 64x128x64).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from tests.conftest import H100_ISSUE8
from twill.arch.model import Fact
from twill.arch.registry import get_arch
from twill.cli import main
from twill.errors import ProgramError
from twill.frontend.programs import iteration_flops, load_program, program_info
from twill.options import SolveOptions
from twill.sweep import PoolEngine, ResultCache, cache_key, pareto_front, parse_space, sweep_grid
from twill.sweep.cache import options_content

GEMM = program_info("gemm").parameters
OPTIONS = SolveOptions(workers=1, time_limit=30)
# (label, II, status) best first: 4096 FLOP/cycle for the three recurrence-bound tiles (ties
# broken by SMEM, then registers, then grid order), 3318 for the TMA-bound 64x64 tile.
EXPECTED = [("block_m=64 block_n=128", 256, "optimal"), ("block_m=128 block_n=64", 256, "optimal"),
            ("block_m=128 block_n=128", 512, "optimal"), ("block_m=64 block_n=64", 158, "optimal")]


def _space(*pairs: str):
    return parse_space(list(pairs), GEMM)


def _summary(result):
    return [(r.label(result.space.varied), r.ii, r.status) for r in result.ranked]


@pytest.fixture(scope="module")
def h100():
    """The issue-8 H100 model (tests/archs/h100_issue8.toml): its GEMM tiles bind on the recurrence and on
    TMA, which the ranking tests need; the recalibrated h100 makes every tile feed-bound."""
    return get_arch(H100_ISSUE8)


@pytest.fixture(scope="module")
def reference(h100):
    """The 2x2 GEMM grid solved in this process, without a cache."""
    return sweep_grid("gemm", h100, _space("block_m=64,128", "block_n=64,128"), OPTIONS)


class TestSpace:
    def test_grid_is_the_product_in_parameter_order(self):
        """Points vary the last parameter fastest and keep unswept parameters at their defaults."""
        space = _space("block_n=64,128", "block_m=64,128")
        assert space.varied == ("block_m", "block_n")
        assert [(p["block_m"], p["block_n"], p["block_k"]) for p in space.points()] == [
            (64, 64, 64), (64, 128, 64), (128, 64, 64), (128, 128, 64)]

    @pytest.mark.parametrize("pairs, match", [
        (["nope=1"], "unknown"),
        (["block_n=64,abc"], "not a valid int"),
        (["block_n="], "empty value"),
        (["block_n=64,,128"], "empty value"),
        (["block_n=64,64"], "listed twice"),
        (["block_n=64", "block_n=128"], "given twice"),
        (["block_n"], "expected NAME=V1,V2"),
    ])
    def test_bad_lists_are_refused(self, pairs, match):
        """Each malformed -p is one ProgramError naming the problem."""
        with pytest.raises(ProgramError, match=match):
            parse_space(pairs, GEMM)

    def test_programs_state_their_flops(self):
        """fa_fwd's work per iteration is its two GEMMs, 2*2*m*n*d, from the program's flops()."""
        assert iteration_flops("fa_fwd", {"block_n": 64}) == 4 * 128 * 64 * 128


def test_program_without_flops_counts_tensor_core_work(h100):
    """toy has no flops(): its work is its tensor-core busy cycles times h100's 4096 FLOP/clk."""
    # given
    body = load_program("toy", h100)
    tc_cycles = sum(op.work("tc") for op in body.ops)
    # when
    result = sweep_grid("toy", h100, parse_space([], {}), OPTIONS)
    # then
    (point,) = result.ranked
    assert iteration_flops("toy") is None and tc_cycles > 0
    assert point.flops == tc_cycles * 4096 and point.ii == 2 and point.status == "optimal"


def test_file_arch_travels_as_text(tmp_path):
    """A worker rebuilds a .toml arch from the text the task carries, even where the file is gone."""
    from twill.arch.registry import archs_dir
    from twill.sweep.cache import arch_content
    from twill.sweep.engines import ArchRef

    copy = tmp_path / "my_h100.toml"
    copy.write_text((archs_dir() / "h100.toml").read_text())
    ref = ArchRef.of(get_arch(str(copy)))
    copy.unlink()
    assert arch_content(ref.load()) == arch_content(get_arch("h100"))


def test_triton_kernel_sweeps_its_launch_constexprs(h100):
    """A Triton kernel's constexprs and launch knobs are its parameters: each point is compiled
    with them, and the K loop's accumulator recurrence scales with BLOCK_N (256 cycles per 64)."""
    pytest.importorskip("triton")
    from pathlib import Path

    from twill.sweep import ProgramSource

    examples = Path(__file__).resolve().parents[1] / "examples" / "triton"
    source = ProgramSource(f"{examples / 'kernels.py'}:matmul_ptr", str(examples / "gemm_ptr.toml"))
    defaults = source.parameters()
    assert (defaults["BLOCK_N"], defaults["num_warps"]) == (256, 8)
    result = sweep_grid(source, h100, parse_space(["BLOCK_N=64,128"], defaults), OPTIONS)
    assert [(r.label(["BLOCK_N"]), r.ii, r.status) for r in result.ranked] == [
        ("BLOCK_N=64", 256, "optimal"), ("BLOCK_N=128", 512, "optimal")]
    assert result.ranked[0].flops == 2 * 128 * 64 * 64  # tensor-core work: no flops() hook on a kernel


class TestCacheKey:
    def test_key_follows_content(self, h100):
        """Options that change a result change the key; a progress callback and a rebuilt body do not."""
        body = load_program("gemm", h100, {"block_n": 128})
        key = cache_key(body, h100, OPTIONS)
        assert key == cache_key(load_program("gemm", h100, {"block_n": 128}), h100, replace(OPTIONS, progress=print))
        assert key != cache_key(body, h100, replace(OPTIONS, time_limit=31))
        assert key != cache_key(body, h100, replace(OPTIONS, workers=2))
        assert key != cache_key(load_program("gemm", h100, {"block_n": 64}), h100, OPTIONS)
        faster = replace(h100, rates={**h100.rates, "tensor_flops_per_clk_fp16": Fact(8192, "test")})
        assert key != cache_key(body, faster, OPTIONS)

    def test_every_result_affecting_option_is_in_the_key(self):
        """Every SolveOptions field that takes part in equality is hashed; the callback is not."""
        content = options_content(OPTIONS)
        assert "progress" not in content
        assert {"time_limit", "workers", "objective", "max_groups", "swp_only"} <= set(content)
        assert set(content) == {name for name in SolveOptions.__dataclass_fields__ if name != "progress"}


class TestSweep:
    def test_ranking_and_iis(self, reference):
        """Ranked by predicted throughput with specific proven IIs and their FLOPs."""
        assert _summary(reference) == EXPECTED
        assert all(r.objectives_proven for r in reference.ranked)
        best = reference.ranked[0]
        assert best.flops == 2 * 64 * 128 * 64 and best.bound == best.ii == 256
        assert reference.ranked[0].tflops > reference.ranked[-1].tflops
        assert "tma" in reference.ranked[-1].binds and "recurrence" in best.binds

    def test_cache_repeats_nothing_and_extends(self, h100, reference, tmp_path):
        """A repeated sweep solves nothing; an extended one solves only its new points."""
        cache = ResultCache(tmp_path)
        first = sweep_grid("gemm", h100, _space("block_m=64,128", "block_n=64,128"), OPTIONS, cache=cache)
        again = sweep_grid("gemm", h100, _space("block_m=64,128", "block_n=64,128"), OPTIONS, cache=cache)
        wider = sweep_grid("gemm", h100, _space("block_m=64,128", "block_n=64,128,256"), OPTIONS, cache=cache)
        assert (first.solved, first.from_cache) == (4, 0)
        assert (again.solved, again.from_cache) == (0, 4)
        assert first.ranked == again.ranked == reference.ranked
        assert all(r.cached for r in again.ranked)
        assert (wider.solved, wider.from_cache) == (2, 4)
        assert {r.label(["block_m", "block_n"]) for r in wider.ranked if not r.cached} == {
            "block_m=64 block_n=256", "block_m=128 block_n=256"}

    def test_process_pool_matches_inline(self, h100, reference):
        """-j 2 gives exactly the answers of -j 1 (completion order does not show)."""
        pooled = sweep_grid("gemm", h100, _space("block_m=64,128", "block_n=64,128"), OPTIONS, engine=PoolEngine(2))
        assert pooled.ranked == reference.ranked

    def test_dask_cluster_matches_inline(self, h100, reference):
        """A Dask cluster of 2 worker processes, reached by its scheduler's address as a remote one
        would be, gives exactly the answers of the inline run."""
        distributed = pytest.importorskip("dask.distributed")
        from twill.sweep import DaskEngine

        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
            engine = DaskEngine(cluster.scheduler_address, 1)
            clustered = sweep_grid("gemm", h100, _space("block_m=64,128", "block_n=64,128"), OPTIONS, engine=engine)
        assert engine.workers == 2
        assert clustered.ranked == reference.ranked

    @pytest.mark.parametrize("engine", ["inline", "pool"])
    def test_interrupted_sweep_resumes_without_solving_twice(self, h100, reference, tmp_path, engine):
        """Ctrl-C after two results, then a rerun: the rerun solves exactly the points not yet reported."""
        cache = ResultCache(tmp_path)
        reported: list[str] = []

        def interrupt_after_two(r):
            reported.append(r.key)
            if len(reported) == 2:
                raise KeyboardInterrupt

        space = _space("block_m=64,128", "block_n=64,128")
        with pytest.raises(KeyboardInterrupt):
            sweep_grid("gemm", h100, space, OPTIONS, cache=cache, on_result=interrupt_after_two,
                       engine=PoolEngine(2) if engine == "pool" else None)
        assert set(reported) <= cache.keys()
        rerun = sweep_grid("gemm", h100, space, OPTIONS, cache=cache)
        solved_again = {r.key for r in rerun.ranked if not r.cached}
        assert not solved_again & set(reported)
        assert solved_again | cache.keys() == {r.key for r in reference.ranked}
        assert rerun.ranked == reference.ranked

    def test_a_point_the_program_refuses_is_an_invalid_row(self, h100):
        """A build error on one point ranks it last with the program's message; the others solve."""
        result = sweep_grid("gemm", h100, _space("dtype=fp16,fp7"), OPTIONS)
        assert [(r.label(["dtype"]), r.status, r.ii) for r in result.ranked] == [
            ("dtype=fp16", "optimal", 1024), ("dtype=fp7", "invalid", None)]
        assert "dtype 'fp7'" in result.ranked[-1].message

    def test_damaged_cache_entry_is_solved_again(self, h100, tmp_path):
        """An entry that does not read back as a schedule counts as missing, not as a crash."""
        cache = ResultCache(tmp_path)
        first = sweep_grid("gemm", h100, _space("block_n=64"), OPTIONS, cache=cache)
        (key,) = cache.keys()
        entry = tmp_path / key[:2] / f"{key}.json"
        doc = json.loads(entry.read_text())
        doc["outcome"]["schedule"]["ii"] = "many"
        entry.write_text(json.dumps(doc))
        again = sweep_grid("gemm", h100, _space("block_n=64"), OPTIONS, cache=cache)
        assert (again.solved, again.ranked) == (1, first.ranked)

    def test_a_crashing_solve_is_an_error_row_and_not_cached(self, h100, tmp_path, monkeypatch):
        """An unexpected exception on one point becomes its row; the others finish; nothing wrong is cached."""
        import twill.sweep.engines as engines

        real = engines.solve

        def crash_on_wide_tiles(problem, options):
            if problem.body.params["block_n"] == 128:
                raise AttributeError("'SumArray' object has no attribute 'index'")
            return real(problem, options)

        monkeypatch.setattr(engines, "solve", crash_on_wide_tiles)
        cache = ResultCache(tmp_path)
        result = sweep_grid("gemm", h100, _space("block_n=64,128"), OPTIONS, cache=cache)
        assert [(r.label(["block_n"]), r.status) for r in result.ranked] == [("block_n=64", "optimal"),
                                                                             ("block_n=128", "error")]
        assert "AttributeError" in result.ranked[-1].message
        assert len(cache.keys()) == 1

    def test_progress_reports_each_point(self, h100):
        """One stderr line per point, counting up, with the best point so far."""
        lines: list[str] = []
        sweep_grid("gemm", h100, _space("block_n=64,128"), OPTIONS, report=lines.append)
        assert [line.split("]")[0] for line in lines] == ["sweep [1/2", "sweep [2/2"]
        assert "best block_n=" in lines[-1] and "TFLOP/s" in lines[-1]


class TestTune:
    def test_budget_solves_that_many_points_deterministically(self, h100):
        """With --budget 3 of 6 points, TPE picks 3 distinct points, the same ones for the same seed."""
        pytest.importorskip("optuna")
        from twill.sweep.tune import sweep_tuned

        space = _space("block_m=64,128", "block_n=64,128,256")
        runs = [sweep_tuned("gemm", h100, space, OPTIONS, budget=3, seed=7) for _ in range(2)]
        assert runs[0].solved == 3 and len({r.index for r in runs[0].ranked}) == 3
        assert runs[0].ranked == runs[1].ranked


def test_pareto_front_keeps_undominated_points():
    """A point is on the front when nothing uses no more resource for at least its throughput."""
    assert pareto_front([(80, 860), (80, 696), (120, 860), (72, 696), (96, 900)]) == [3, 0, 4]


class TestCli:
    def test_sweep_prints_ranked_table_and_writes_plot(self, tmp_path, capsys):
        """The table lists points best first; the plot is a PNG; the JSON holds every point."""
        plot, out = tmp_path / "sweep.png", tmp_path / "sweep.json"
        argv = ["sweep", "gemm", "--arch", H100_ISSUE8, "-p", "block_m=64,128", "-p", "block_n=64,128", "-q",
                "--cache", str(tmp_path / "cache"), "--plot", str(plot), "--json", str(out)]
        assert main(argv) == 0
        text = capsys.readouterr().out
        rows = [re.split(r"\s{2,}", line) for line in text.splitlines() if line[:1].isdigit()]
        assert [(r[1], int(r[3]), r[2]) for r in rows] == EXPECTED
        assert "4 solved" in text and "best: block_m=64 block_n=128 at II 256 (optimal)" in text
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert [p["ii"] for p in json.loads(out.read_text())["points"]] == [256, 256, 512, 158]
        assert main(argv) == 0
        assert "0 solved" in capsys.readouterr().out

    def test_ctrl_c_then_rerun_solves_only_the_rest(self, tmp_path):
        """A real SIGINT once the first point is cached: exit 130 at once, and the rerun solves only
        the point that was running (fa_fwd h100 points, each cut at 2 s: whatever they found is cached)."""
        # given: a sweep interrupted while its second point is being solved
        cache = tmp_path / "cache"
        argv = [sys.executable, "-m", "twill", "sweep", "fa_fwd", "--arch", "h100", "-p", "block_n=64,128",
                "--time-limit", "2", "--phase-limit", "1", "--cache", str(cache), "--plot", "", "-q"]
        run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(cache.glob("*/*.json")) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        began = time.monotonic()
        _, err = run.communicate(timeout=60)
        # then it stops within seconds, with exactly one result kept
        assert run.returncode == 130 and "interrupted" in err
        assert time.monotonic() - began < 10
        assert len(list(cache.glob("*/*.json"))) == 1
        # when it runs again, it solves the other point only
        again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert "1 solved on a pool of 1 process, 1 from the cache" in again.stdout

    def test_bad_plot_name_is_refused_before_solving(self, tmp_path, capsys):
        """A plot the sweep could not write fails at once, before any point is solved."""
        argv = ["sweep", "gemm", "--arch", "h100", "--cache", str(tmp_path), "--plot", "sweep.jpg"]
        assert main(argv) == 2
        assert "must be a .png, .svg or .pdf" in capsys.readouterr().err
        assert not ResultCache(tmp_path).keys()

    @pytest.mark.parametrize("param", ["nope=1", "block_n=64,abc", "block_n="])
    def test_bad_parameter_is_one_line_exit_2(self, param, capsys):
        """Bad input is refused before any solve, on one line, with exit status 2."""
        assert main(["sweep", "gemm", "--arch", "h100", "-p", param, "--no-cache", "--plot", ""]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("twill: error: parameter") and "\n" not in err
