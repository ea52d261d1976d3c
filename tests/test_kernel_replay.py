"""bench/kernel_replay.py: a generated kernel's own statements replayed on an arch's costs (issue 21, session 70)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import kernel_replay as kr  # noqa: E402

from twill.codegen.emit import emit_source  # noqa: E402
from twill.codegen.plan import make_plan  # noqa: E402
from twill.codegen.protocol import executed  # noqa: E402
from twill.schedule import Schedule  # noqa: E402
from twill.validate import problem_for  # noqa: E402

CODEGEN = ROOT / "bench" / "codegen"
RECORD = ROOT / "bench" / "results" / "h100" / "mio" / "fa_consumer_full_partner.json"


def _line(r: kr.KernelReplay, group: int, start: str) -> float:
    return sum(c for code, c in r.per_line[group].items() if code.startswith(start))


def test_executed_runs_the_steady_loop_once_per_trip_after_the_peeled_prologue():
    sched = Schedule.read(CODEGEN / "fa_opt.json")
    plan = make_plan(sched, problem_for(sched))
    source = emit_source(plan)
    for n in (1, 2, 5):
        lines = executed(source, 1, plan.frame.trip_count, n)
        qk = [env for code, comment, env in lines if comment.startswith("qk0:")]
        pv = [env for code, comment, env in lines if comment.startswith("pv0:")]
        assert len(qk) == n and len(pv) == n  # every iteration's op exactly once, prologue and epilogue included
        assert [env.get("t") for env in qk if "t" in env] == list(range(1, n))  # the steady loop's trips


@pytest.mark.parametrize(("name", "ii"), [("fa_opt.json", 2048), ("fa_mio.json", 2524), ("gemm_ws1.json", 672),
                                          ("gemm_swp.json", 672), ("fa_handoff_copy.json", 2383)])
def test_a_kernel_replays_at_its_schedules_ii_on_the_schedules_own_costs(name, ii):
    """The emitted waits (rings, hand-offs, turns, retires) add nothing the schedule did not plan."""
    r = kr.replay_kernel(CODEGEN / name)
    assert r.cycles_per_iteration == pytest.approx(ii, abs=1)


def test_the_deferred_retire_holds_gemm_ws2s_b_ring_past_the_models_release():
    """gemm_ws2 releases slot t - 1 only after wgmma t issues and wgmma t - 1 retires (rule 7's deferred retire);
    the model frees it at the reader's completion. Three B slots at the p99 TMA latency then wait on the ring."""
    r = kr.replay_kernel(CODEGEN / "gemm_ws2.json")
    assert r.cycles_per_iteration > 1211 * 1.05
    assert _line(r, 0, "mbarrier.wait(ch1_empty") > 500  # the loader waits for B's slot
    assert _line(r, 1, "mbarrier.wait(ch1_full") > 500  # and the consumer for B's landing


def test_a_step_at_one_rate_in_every_situation_takes_exactly_that_rate():
    rates = {op: dict.fromkeys(kr._MODES.values(), 300.0) for op in kr.FA_STEPS}
    r = kr.replay_kernel(CODEGEN / "fa_opt.json", model=kr.Model(rates=rates))
    assert _line(r, 1, "exp0 = ") == pytest.approx(300, abs=1)
    assert _line(r, 2, "rowmax1 = ") == pytest.approx(300, abs=1)


def test_a_step_runs_at_its_beside_wgmma_rate_while_the_tensor_core_is_busy():
    """With the recorded rates, fa_opt's exps run while the other consumer's wgmmas execute: slower than alone,
    faster than two warpgroups' exps beside a wgmma stream."""
    rates = kr.step_rates(RECORD)
    r = kr.replay_kernel(CODEGEN / "fa_opt.json", "bench/codegen/h200_warpgroup_mio.toml", kr.Model(rates=rates))
    for group, line in ((1, "exp0 = "), (2, "exp1 = ")):
        assert rates["exp"]["alone"] < _line(r, group, line) <= rates["exp"]["beside_wgmma"] + 1


def test_a_one_slot_tensor_core_queue_holds_the_issue_for_the_work_ahead():
    """Queue depth 1: each k-step instruction waits for the one before to finish (64 cycles at m64n128k16)."""
    free = kr.replay_kernel(CODEGEN / "fa_opt.json", model=kr.Model(queue=64))
    held = kr.replay_kernel(CODEGEN / "fa_opt.json", model=kr.Model(queue=1))
    issue = _line(held, 1, "s0 = warpgroup_mma(") + _line(held, 1, "o0 = warpgroup_mma(")
    assert issue >= 14 * 64  # 16 instructions, all but the first behind one in flight
    assert _line(free, 1, "s0 = warpgroup_mma(") == pytest.approx(22 + 7 * 20, abs=1)  # SS: the measured issue
    assert _line(free, 1, "o0 = warpgroup_mma(") == pytest.approx(67 + 7 * 12, abs=1)  # RS


def test_step_rates_reads_every_fa_step_in_every_situation():
    rates = kr.step_rates(RECORD)
    assert set(rates) == set(kr.FA_STEPS)
    assert rates["exp"]["alone"] == pytest.approx(586.3, abs=0.1)
    assert rates["exp"]["pair_beside_wgmma"] == pytest.approx(1694.3, abs=0.1)
    old = kr.step_rates(ROOT / "bench" / "results" / "h200" / "fa_consumer.json")  # no pair beside wgmma there
    assert old["exp"]["pair_beside_wgmma"] == pytest.approx(1140.2 * 918.3 / 586.3, rel=1e-3)


def test_sync_charges_each_mbarrier_wait_and_bar_sync_the_archs_measured_cost():
    """fa_opt on its own arch: two ring waits (64.5 each) and one bar.sync (42) per consumer step, nothing else."""
    plain = kr.replay_kernel(CODEGEN / "fa_opt.json")
    synced = kr.replay_kernel(CODEGEN / "fa_opt.json", model=kr.Model(sync=True))
    assert _line(synced, 1, "mbarrier.wait(ch0_full") == pytest.approx(64.5, abs=0.5)
    assert _line(synced, 1, 'gl.inline_asm_elementwise("bar.sync') == pytest.approx(42, abs=0.5)
    assert 2048 < synced.cycles_per_iteration <= 2048 + 2 * 64.5 + 42 + 1
    assert plain.cycles_per_iteration == pytest.approx(2048, abs=1)


def test_codegen_prints_the_kernel_replay_and_names_the_wait_the_schedule_did_not_plan(tmp_path, capsys):
    from twill.cli import main

    assert main(["codegen", str(CODEGEN / "fa_opt.json"), "-o", str(tmp_path / "a.py")]) == 0
    assert "kernel replay on the schedule's costs: 2048 cycles per iteration (II 2048)\n" in capsys.readouterr().out
    assert main(["codegen", str(CODEGEN / "gemm_ws2.json"), "-o", str(tmp_path / "b.py")]) == 0
    out = capsys.readouterr().out
    assert "1314 cycles per iteration (II 1211); the kernel waits where the schedule does not, most at group 0's " \
           "mbarrier.wait(ch1_empty" in out


def test_the_core_replay_runs_the_schedules_own_body():
    """twill.codegen.replay times ops from the schedule's own problem (its stored body), as `twill codegen` plans."""
    from twill.codegen.replay import replay_schedule

    assert replay_schedule(Schedule.read(CODEGEN / "fa_war.json")).cycles_per_iteration == pytest.approx(2654, abs=1)
    assert replay_schedule(Schedule.read(CODEGEN / "gemm_ws1.json")).cycles_per_iteration == pytest.approx(672, abs=1)


def test_cross_rates_read_both_orders_of_each_pair_and_the_replay_uses_them():
    cross = kr.cross_rates(ROOT / "bench" / "results" / "h100" / "cross" / "fa_consumer_cross.json")
    assert cross["exp", "rowmax", False] == pytest.approx(637.4, abs=0.1)
    assert cross["rowmax", "exp", False] == pytest.approx(443.7, abs=0.1)  # the row max suffers, the exp hardly
    assert cross["rowmax", "exp", True] == pytest.approx(794.9, abs=0.1)
    assert len(cross) == 5 * 4 * 2  # every ordered pair of different steps, with the tensor core idle and busy
    rates = kr.step_rates(RECORD)
    plain = kr.replay_kernel(CODEGEN / "fa_war.json", "bench/codegen/h200_warpgroup_mio.toml", kr.Model(rates=rates))
    crossed = kr.replay_kernel(CODEGEN / "fa_war.json", "bench/codegen/h200_warpgroup_mio.toml",
                               kr.Model(rates=rates, cross=cross))
    assert crossed.cycles_per_iteration > plain.cycles_per_iteration * 1.05  # FA3's order overlaps different steps


def test_the_documented_table_reproduces_from_the_recorded_reports(capsys):
    """docs/benchmarks.md's replay table: the measured column from the Nsight reports, the replay at measured costs."""
    model = kr.Model(rates=kr.step_rates(RECORD), queue=7, sync=True)
    kr._table("bench/codegen/h200_warpgroup_mio.toml", model, 32)
    out = capsys.readouterr().out
    assert "| fa_opt | 2592 | 2520 | -2.8% |" in out and "| fa_war | 3020 | 2471 | -18.2% |" in out
    assert "within 10%: 4 of 8 compared, the largest 18.2%; the kernel measured after: +26.2%" in out
