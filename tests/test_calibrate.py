"""Calibration: recorded H100 microbenchmark results -> an arch TOML that loads and cites them."""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from twill.arch.calibrate import (
    CalibrationError,
    calibrated_toml,
    datasheet_toml,
    derive,
    fit_line,
    load_base,
    load_results,
)
from twill.arch.toml import load_arch_toml
from twill.errors import ArchError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "h100"
RESULTS_H200 = ROOT / "bench" / "results" / "h200"
RESULTS_H100_ISSUE21 = ROOT / "bench" / "results" / "h100" / "issue21"  # the H100 again, with the fixed methods
H100 = ROOT / "archs" / "h100.toml"
H200 = ROOT / "archs" / "h200.toml"


@pytest.fixture(scope="module")
def results():
    return load_results(RESULTS)


def _write(tmp_path: Path, results, base: dict, name: str = "cal") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(calibrated_toml(results, base, name=name, description="test", results_label="recorded"))
    return path


def test_generated_toml_loads_and_carries_the_measurements(tmp_path, results):
    """Every derived number lands in a TOML that the strict loader accepts, with a W source."""
    # given
    measured = derive(results)
    # when
    arch = load_arch_toml(_write(tmp_path, results, load_base(H100)))
    # then
    for m in measured:
        fact = getattr(arch, m.section)[m.key]
        assert fact.value == m.value
        assert fact.source.startswith("W: measured on NVIDIA H100 80GB HBM3, 2026-11-26")
        assert f"recorded/{m.bench}.json" in fact.source
    assert arch.rate("mufu_ops_per_clk") == 16.0
    assert arch.rate("convert_ops_per_clk") == 63.0
    assert arch.rate("tensor_flops_per_clk_fp16") == 4096
    assert int(arch.chip["clock_mhz"].value) == 1590


def test_measurements_come_from_the_recorded_numbers(results):
    """Spot checks against the raw JSON: the derivation reads what the benchmarks wrote."""
    # given
    by_key = {(m.section, m.key): m.value for m in derive(results)}
    sync = {r["kind"] + str(r.get("bytes", "")): r for r in results["sync"]["records"]}
    # then
    assert by_key[("sync", "mbarrier")] == round(sync["handoff0"]["cycles_per_iter"] / 2, 1)
    assert by_key[("sync", "wait_issue")] == round(sync["wait_issue"]["cycles_per_iter"], 1)
    lat = next(r for r in results["wgmma"]["records"]
               if r["kind"] == "latency" and r["n"] == 128 and r["dtype"] == "fp16" and r["a_source"] == "SS")
    assert by_key[("latencies", "mma")] == round(lat["cycles_per_wgmma"] - 64, 0)
    lock = sorted(r["bytes_per_clk_per_sm"]["median"] for r in results["tma"]["records"]
                  if r["kind"] == "throughput" and r["pattern"] == "lockstep" and r["bytes"] >= 32768)
    bench_mhz = sorted(r["sm_clock_mhz"]["median"] for r in results["tma"]["records"] if r["kind"] == "throughput")
    ratio = bench_mhz[len(bench_mhz) // 2] / by_key[("chip", "clock_mhz")]
    assert by_key[("rates", "tma_bytes_per_clk")] == pytest.approx(lock[len(lock) // 2] * ratio, abs=0.06)
    assert by_key[("rates", "tma_bytes_per_clk_distinct")] < by_key[("rates", "tma_bytes_per_clk")] / 2


def test_datasheet_values_are_kept_beside_the_measured_ones(tmp_path, results):
    """A replaced fact keeps the base's value and source under `datasheet`, and the loader shows it."""
    # given
    base = tomllib.loads((ROOT / "tests" / "data" / "h100_datasheet.toml").read_text())  # an uncalibrated arch
    # when
    path = _write(tmp_path, results, base)
    raw = tomllib.loads(path.read_text())
    # then
    conv = raw["rates"]["convert_ops_per_clk"]
    assert conv["value"] == 63.0
    assert conv["datasheet"] == base["rates"]["convert_ops_per_clk"]
    assert "[datasheet: 16;" in load_arch_toml(path).rates["convert_ops_per_clk"].source
    assert raw["limits"] == base["limits"]  # unmeasured facts are copied unchanged


def test_recalibrating_keeps_the_original_datasheet(tmp_path, results):
    """Calibrating a calibrated file changes nothing: the first datasheet value survives."""
    # given
    first = _write(tmp_path, results, load_base(H100))
    # when
    second = _write(tmp_path, results, load_base(first), name="cal2")
    # then
    a, b = tomllib.loads(first.read_text()), tomllib.loads(second.read_text())
    assert a["rates"] == b["rates"] and a["sync"] == b["sync"] and a["latencies"] == b["latencies"]


def test_builtin_h100_is_the_calibration_of_the_recorded_results():
    """archs/h100.toml is exactly what `twill calibrate` makes of bench/results/h100/issue21 (reproducible): the
    H100's own results with the fixed methods, no fact borrowed from the H200."""
    # given
    text = H100.read_text()
    data = tomllib.loads(text)
    # when
    again = calibrated_toml(load_results(RESULTS_H100_ISSUE21), data, name=data["name"],
                            description=data["description"], results_label="bench/results/h100/issue21")
    # then
    assert again == text
    assert not any(str(f.get("source", "")).startswith("I: from a measurement on NVIDIA H200")
                   for table in data.values() if isinstance(table, dict) for f in table.values() if isinstance(f, dict))
    assert (data["latencies"]["tma"]["value"], data["rates"]["smem_bytes_per_clk_beside_wgmma"]["value"]) == (1345, 63.1)


def test_results_without_smem_take_it_from_the_reference(results):
    """Issue 8's H100 results predate smem.cu: with the H200's as reference the SMEM rates come across
    tagged I (same SM), so the arch charges a hand-off's copy; without a reference there are none."""
    base = tomllib.loads(H100.read_text())
    kw = {"name": "h100", "description": "d", "results_label": "bench/results/h100"}
    borrowed = tomllib.loads(calibrated_toml(results, base, reference=load_results(RESULTS_H200),
                                             reference_label="bench/results/h200", **kw))
    fact = borrowed["rates"]["smem_bytes_per_clk_beside_wgmma"]
    assert fact["value"] == 63.1 and fact["source"].startswith("I: from a measurement on NVIDIA H200")
    assert "not measured on this GPU" in fact["source"]
    del base["rates"]["smem_bytes_per_clk"], base["rates"]["smem_bytes_per_clk_beside_wgmma"]
    alone = tomllib.loads(calibrated_toml(results, base, **kw))
    assert "smem_bytes_per_clk_beside_wgmma" not in alone["rates"]


def test_builtin_h200_is_the_calibration_of_its_results():
    """archs/h200.toml is exactly `twill calibrate` of bench/results/h200 (issue 21), with the H200's own
    memory facts: the measured HBM rate and L2 size, the datasheet 4.8 TB/s kept beside it, 141 GB."""
    # given
    text = H200.read_text()
    data = tomllib.loads(text)
    # when
    again = calibrated_toml(load_results(RESULTS_H200), data, name=data["name"], description=data["description"],
                            results_label="bench/results/h200")
    # then
    assert again == text
    chip = data["chip"]
    assert chip["hbm_tbps"]["datasheet"]["value"] == 4.8 and 4.0 < chip["hbm_tbps"]["value"] < 4.8
    assert chip["hbm_gb"]["value"] == 141 and chip["hbm_gb"]["source"].startswith("V:")
    assert chip["l2_mb"]["value"] == 60 and "62914560" in chip["l2_mb"]["source"]


def test_tma_latency_uses_the_unquantized_records():
    """The H200 results hold the first runs' wait loop (every sample of a size on one value of a ~190-cycle
    grid) beside try_wait with the suspend hint (a spread of values); the latency fit reads the latter."""
    # given
    h200 = load_results(RESULTS_H200)
    lat = [r for r in h200["tma"]["records"] if r["kind"] == "latency" and r["source"] == "L2"
           and r["poll"] == "try_wait" and not r["swizzle_128b"] and r["bytes"] == 16384 and r["ok"]]
    legacy = next(r for r in lat if r["legacy_loop"] and not r["dither"])
    hinted = next(r for r in lat if r["suspend_hint_ns"] == 10_000_000 and not (r["watch"] or r["dither"] or r["busy"]))
    # then: the old loop gives one value for all 256 samples, the fixed one a spread below it
    assert len(set(legacy["cycles_raw"])) <= 2 and len(set(hinted["cycles_raw"])) >= 8
    assert max(hinted["cycles_raw"]) < legacy["cycles"]["median"]
    isolated_only = {k: v for k, v in h200.items() if k != "tma_loaded"}
    # when
    fact = next(m for m in derive(isolated_only) if m.key == "tma")
    # then: the intercept of the hinted medians, converted to the sustained clock
    pts = sorted((r["bytes"] / 1024, r["cycles"]["median"]) for r in h200["tma"]["records"]
                 if r["kind"] == "latency" and r["source"] == "L2" and r["poll"] == "try_wait"
                 and not r["swizzle_128b"] and r["bytes"] >= 16384 and r["suspend_hint_ns"] == 10_000_000
                 and not (r["watch"] or r["dither"] or r["busy"] or r["legacy_loop"]))
    intercept, _ = fit_line(pts)
    clock = next(r for r in h200["wgmma"]["records"] if r["kind"] == "sustained")["sm_clock_mhz"]["median"]
    bench = statistics.median(r["sm_clock_mhz"]["median"] for r in h200["tma"]["records"] if r["kind"] == "throughput")
    assert fact.value == round(intercept * clock / bench)
    assert not fact.derived_from_reference and "suspend hint" in fact.how


def test_quantized_results_say_so_and_take_the_reference(results):
    """The H100's records predate the fix: alone they give the quantized fit, flagged; with the H200 as the
    reference the latency is the H200's unquantized fit at the H100's clock, tagged I (derived, not measured)."""
    # when
    alone = next(m for m in derive(results) if m.key == "tma")
    with_ref = next(m for m in derive(results, load_results(RESULTS_H200)) if m.key == "tma")
    h200_isolated = {k: v for k, v in load_results(RESULTS_H200).items() if k != "tma_loaded"}
    h200 = next(m for m in derive(h200_isolated) if m.key == "tma")
    # then
    assert "QUANTIZED" in alone.how and not alone.derived_from_reference
    assert with_ref.derived_from_reference and "not measured on this GPU" in with_ref.how
    assert with_ref.value == pytest.approx(h200.value * 1590 / 1545, abs=1)
    text = calibrated_toml(results, load_base(H100), name="h", description="d", results_label="r",
                           reference=load_results(RESULTS_H200), reference_label="ref")
    tma = tomllib.loads(text)["latencies"]["tma"]
    assert tma["source"].startswith("I: from a measurement on NVIDIA H200") and "ref/tma.json" in tma["source"]


def _h200_facts() -> tuple[dict, dict, float]:
    h200 = load_results(RESULTS_H200)
    facts = {m.key: m for m in derive(h200)}
    return h200, facts, facts["clock_mhz"].value


def _gemm_pace_record(h200: dict) -> dict:
    """tma_loaded.json's record at a GEMM step's pace: 128 x 256 tiles, 1024 cycles per step, a ring of 4."""
    return next(r for r in h200["tma_loaded"]["records"] if r["ctas"] > 1 and r["block_n"] == 256
                and r["pace_ns"] == 663 and r["depth"] == 4)


def test_tma_latency_under_load_is_what_a_gemm_ring_waits_for():
    """With tma_loaded.json, latencies.tma is the median landing of a GEMM step's B tile after its A tile's issue,
    every SM loading at the tensor cores' pace, less the model's transfer time for both tiles."""
    # given
    h200, facts, clock = _h200_facts()
    # when: the record the calibration must read: 128 x 256 tiles at 1024 cycles per step, the deepest ring
    rec = _gemm_pace_record(h200)
    land = rec["latency_b_cycles"]["median"] * clock / rec["sm_clock_mhz"]["median"]
    # then
    assert rec["cycles_per_step"]["median"] <= 1.02 * rec["pace_cycles"]  # the pace held
    assert facts["tma"].value == pytest.approx(land - (16384 + 32768) / facts["tma_bytes_per_clk"].value, abs=1)
    assert facts["tma"].value > 2 * next(m for m in derive({k: v for k, v in h200.items() if k != "tma_loaded"})
                                         if m.key == "tma").value  # far above an isolated load's
    assert "under load" in facts["tma"].how and facts["tma"].bench == "tma_loaded"
    # and the saturated feed under a GEMM's sharing is far below every SM on the same tiles
    assert facts["tma_bytes_per_clk_gemm"].value < 0.5 * facts["tma_bytes_per_clk"].value


def test_the_panel_latency_is_the_tail_a_gemm_ring_must_cover():
    """latencies.tma_gemm: the same record's p99 landing less both tiles at the GEMM feed, so a ring planned
    on it covers the tail of in-order landings (issue 21: rings planned on the median stalled)."""
    h200, facts, clock = _h200_facts()
    rec = _gemm_pace_record(h200)
    p99 = rec["latency_b_percentiles"]["p99"] * clock / rec["sm_clock_mhz"]["median"]
    assert facts["tma_gemm"].value == pytest.approx(p99 - (16384 + 32768) / facts["tma_bytes_per_clk_gemm"].value,
                                                    abs=1)
    assert facts["tma_gemm"].value == 1878 and facts["tma_gemm"].bench == "tma_loaded"
    assert facts["tma_gemm"].value > 2 * facts["tma"].value  # the tail, not the median
    assert "99th percentile" in facts["tma_gemm"].how


def test_a_loaded_ring_that_missed_its_pace_gives_no_latency():
    h200 = load_results(RESULTS_H200)
    slow = json.loads(json.dumps(h200["tma_loaded"]))
    for r in slow["records"]:
        r["cycles_per_step"]["median"] = 1.5 * r["pace_cycles"] + 1
    with pytest.raises(CalibrationError, match="held the MMA's pace"):
        derive({**h200, "tma_loaded": slow})


def test_smem_facts_come_from_the_smem_benchmark():
    """Shared-memory bandwidth: the LSU peak, and what LSU loads keep beside wgmma's operand reads."""
    # given
    h200 = load_results(RESULTS_H200)
    by_key = {m.key: m for m in derive(h200)}
    alone = [r["smem_bytes_per_clk_per_sm"]["median"] for r in h200["smem"]["records"]
             if r["kind"] == "alone" and r["mem_warps"] >= 16]
    # then
    assert min(alone) <= by_key["smem_bytes_per_clk"].value <= max(alone) <= 128.5
    assert by_key["smem_bytes_per_clk_beside_wgmma"].value < by_key["smem_bytes_per_clk"].value / 1.5
    # results without smem.json (the H100's, recorded before issue 21) still calibrate, without those facts
    assert "smem_bytes_per_clk" not in {m.key for m in derive(load_results(RESULTS))}


def test_warpgroup_step_rates_come_from_the_fa_consumer_benchmark():
    """One warpgroup's softmax steps beside another warpgroup's wgmmas (issue 21): each rate is the step's work over
    its measured cycles, below the per-SM pipe rate, and the source keeps the alone and paired numbers."""
    # given
    h200 = load_results(RESULTS_H200)
    by_key = {m.key: m for m in derive(h200, warpgroup_rates=True)}
    steps = {(r["step"], r["mode"]): r for r in h200["fa_consumer"]["records"] if r["kind"] == "step"}
    # then
    for step, key, pipe, work in (("ex2", "mufu_ops_per_clk_warpgroup", "mufu_ops_per_clk", 8192),
                                  ("rescale", "fp32_ops_per_clk_warpgroup", "fp32_ops_per_clk", 8192),
                                  ("cast", "convert_ops_per_clk_warpgroup", "convert_ops_per_clk", 4096),
                                  ("row_max", "alu_reduce_ops_per_clk_warpgroup", "alu_ops_per_clk", 8192),
                                  ("row_sum", "fp32_reduce_ops_per_clk_warpgroup", "fp32_ops_per_clk", 8192)):
        beside = steps[(step, "beside_wgmma")]
        assert by_key[key].value == pytest.approx(work / beside["cycles"], abs=0.01)
        assert by_key[key].value < by_key[pipe].value
        assert beside["cycles"] > steps[(step, "alone")]["cycles"]  # the tensor cores' work slows every step
        assert f"alone {steps[(step, 'alone')]['cycles']:.1f}" in by_key[key].how
    # results without fa_consumer.json (the H100's) calibrate without these facts, and so does the default
    assert not any(k.endswith("_warpgroup") for k in {m.key for m in derive(load_results(RESULTS), warpgroup_rates=True)})
    assert not any(k.endswith("_warpgroup") for k in {m.key for m in derive(h200)})


def test_the_wgmma_issue_cost_comes_from_the_own_group_records():
    """A warpgroup that keeps its own wgmma group in flight through a softmax step (issue 21, FA3's order) spends
    its share of fence + 8 wgmma + commit per instruction: the variant's latencies.mma_issue, the larger of SS
    and RS rounded up; the exp step beside its own group is measured too and is no slower than beside another
    warpgroup's wgmmas (the charged rate), and the default calibration leaves the issue at one cycle."""
    # given
    h200 = load_results(RESULTS_H200)
    by_key = {m.key: m for m in derive(h200, warpgroup_rates=True)}
    steps = {(r["step"], r["mode"]): r for r in h200["fa_consumer"]["records"] if r["kind"] == "step"}
    # then
    per = [steps[("ex2", mode)]["own_issue_cycles_per_group"]["median"] / 8 for mode in ("own_wgmma_ss", "own_wgmma_rs")]
    assert by_key["mma_issue"].section == "latencies" and by_key["mma_issue"].value == math.ceil(max(per)) == 24
    assert all(steps[(s, m)]["ok"] for s in ("ex2", "row_max", "row_sum")
               for m in ("own_wgmma_ss", "own_wgmma_rs", "own_wgmma_ss_beside_wgmma"))
    assert steps[("ex2", "alone")]["cycles"] < steps[("ex2", "own_wgmma_ss")]["cycles"] < steps[("ex2", "beside_wgmma")]["cycles"]
    assert "mma_issue" not in {m.key for m in derive(h200)}
    assert "mma_issue" not in {m.key for m in derive(load_results(RESULTS), warpgroup_rates=True)}


def test_the_mio_variant_changes_only_the_copy_rate_to_the_measured_one():
    """bench/codegen/h200_warpgroup_mio.toml is the warpgroup variant with one fact changed by hand: a hand-off copy at
    the stmatrix stream's rate beside another warpgroup's exp2 step and a third's wgmmas, as recorded in
    bench/results/h200/mio/fa_consumer.json (issue 21, session 68)."""
    # given
    codegen = ROOT / "bench" / "codegen"
    mio = tomllib.loads((codegen / "h200_warpgroup_mio.toml").read_text())
    base = tomllib.loads((codegen / "h200_warpgroup_rates.toml").read_text())
    records = json.loads((RESULTS_H200 / "mio" / "fa_consumer.json").read_text())["records"]
    # when
    stream = next(r for r in records if r["kind"] == "step" and r["step"] == "ex2" and r["mode"] == "beside_stsm_and_wgmma")
    changed = {(section, key) for section in base if isinstance(base[section], dict)
               for key in base[section] if mio[section].get(key) != base[section][key]}
    # then
    assert changed == {("rates", "smem_bytes_per_clk_beside_wgmma")}
    assert stream["ok"] and mio["rates"]["smem_bytes_per_clk_beside_wgmma"]["value"] == round(
        stream["stsm_bytes_per_clk"]["median"], 1)
    assert {k for k in mio if k not in ("name", "description")} == {k for k in base if k not in ("name", "description")}


def test_the_war_variant_changes_only_the_mufu_rate_to_one_warpgroups_exp_rate():
    """bench/codegen/h200_warpgroup_war.toml is the mio variant with one more fact changed by hand: the SM's MUFU at the
    exp2 rate one warpgroup reaches beside wgmmas (fa_consumer.json's beside_wgmma record: 8192 results per step),
    so that two consumers' exps do not overlap (issue 21, session 69)."""
    # given
    codegen = ROOT / "bench" / "codegen"
    war = tomllib.loads((codegen / "h200_warpgroup_war.toml").read_text())
    base = tomllib.loads((codegen / "h200_warpgroup_mio.toml").read_text())
    records = json.loads((RESULTS_H200 / "fa_consumer.json").read_text())["records"]
    # when
    beside = next(r for r in records if r.get("step") == "ex2" and r.get("mode") == "beside_wgmma")
    changed = {(section, key) for section in base if isinstance(base[section], dict)
               for key in base[section] if war[section].get(key) != base[section][key]}
    # then
    assert changed == {("rates", "mufu_ops_per_clk")}
    assert beside["ok"] and war["rates"]["mufu_ops_per_clk"]["value"] == round(8192 / beside["cycles"], 2)


@pytest.mark.parametrize(("chip", "results", "arch"), [("h200", RESULTS_H200, H200), ("h100", RESULTS_H100_ISSUE21, H100)])
def test_the_warpgroup_variant_is_the_calibration_with_its_rates(chip: str, results: Path, arch: Path):
    """bench/codegen/{chip}_warpgroup_rates.toml is `twill calibrate --warpgroup-rates` of the chip's results: its built-in
    arch with the five step rates and the wgmma issue cost added and nothing else changed (the H100's, from its own
    fa_consumer.json, reproduce the H200's rates: the same SM)."""
    # given
    path = ROOT / "bench" / "codegen" / f"{chip}_warpgroup_rates.toml"
    text = path.read_text()
    data = tomllib.loads(text)
    # when
    again = calibrated_toml(load_results(results), data, name=data["name"], description=data["description"],
                            results_label=results.relative_to(ROOT).as_posix(), warpgroup_rates=True)
    # then
    assert again == "".join(text.splitlines(keepends=True)[1:])  # the first line says which variant it is
    base = tomllib.loads(arch.read_text())
    added = {k for k in data["rates"] if k not in base["rates"]}
    assert added == {"mufu_ops_per_clk_warpgroup", "fp32_ops_per_clk_warpgroup", "convert_ops_per_clk_warpgroup",
                     "alu_reduce_ops_per_clk_warpgroup", "fp32_reduce_ops_per_clk_warpgroup"}
    assert {k: v for k, v in data["latencies"].items() if k != "mma_issue"} == base["latencies"]
    assert "mma_issue" not in base["latencies"] and data["latencies"]["mma_issue"]["value"] == 24
    assert all(data[s] == base[s] for s in ("chip", "limits", "units", "sync", "features") if s in base)


def test_datasheet_snapshot_is_the_builtin_h100_before_calibration():
    """tests/data/h100_datasheet.toml, to which hand-worked tests pin their arithmetic, is the datasheet
    view of archs/h100.toml: every measured fact back at the value it replaced."""
    # given
    snapshot = ROOT / "tests" / "data" / "h100_datasheet.toml"
    data = tomllib.loads(snapshot.read_text())
    # when
    view = datasheet_toml(load_base(H100), name=data["name"], description=data["description"])
    # then
    assert snapshot.read_text() == view
    assert data["chip"]["clock_mhz"]["value"] == 1830 and data["rates"]["tma_bytes_per_clk"]["value"] == 36
    assert "tma_bytes_per_clk_hbm" not in data["rates"]  # introduced by the measurement, no datasheet value


def test_repeated_run_gives_the_same_facts(results):
    """A second run of the suite on the same H100 (bench/results/h100/repeat) moves no fact by more than 1.5%."""
    # given
    again = {(m.section, m.key): m.value for m in derive(load_results(RESULTS / "repeat"))}
    # then
    for m in derive(results):
        assert again[(m.section, m.key)] == pytest.approx(m.value, rel=0.015), m.key


def test_failed_measurement_is_refused(tmp_path, results):
    """A record whose self-check failed cannot become an arch number."""
    # given
    broken = json.loads(json.dumps(results))
    for r in broken["pipes"]["records"]:
        if r["kind"] == "throughput" and r["op"] == "ex2":
            r["ok"] = False
    # then
    with pytest.raises(CalibrationError, match="failed its self-check"):
        derive(broken)


def test_missing_result_file_is_named(tmp_path):
    """A results folder without one of the four files fails with that file's name."""
    # given
    for name in ("wgmma", "tma", "pipes"):
        shutil.copy(RESULTS / f"{name}.json", tmp_path)
    # then
    with pytest.raises(CalibrationError, match=r"sync\.json: missing"):
        load_results(tmp_path)


def test_loader_rejects_a_datasheet_value_without_source(tmp_path):
    """The datasheet beside a measured value is a fact too: it needs a source."""
    # given
    text = H100.read_text().replace('datasheet = { value = 16, source = "V: CUDA Guide throughput table',
                                    'datasheet = { value = 16, note = "V: CUDA Guide throughput table', 1)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    # then
    with pytest.raises(ArchError, match=r"convert_ops_per_clk\.datasheet: the value 16 has no source"):
        load_arch_toml(path)


def test_fit_line_recovers_a_line():
    """The least-squares fit used for hand-off and TMA latency is exact on exact data."""
    intercept, slope = fit_line([(1, 90.0), (2, 105.0), (8, 195.0)])
    assert intercept == pytest.approx(75.0) and slope == pytest.approx(15.0)


def _twill(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": path} if path is not None else None
    return subprocess.run([sys.executable, "-m", "twill", *args], capture_output=True, text=True, cwd=ROOT, env=env)


def test_cli_from_results_writes_a_loadable_arch(tmp_path):
    """`twill calibrate --from-results` needs no GPU and writes a TOML the other commands accept."""
    # when
    out = tmp_path / "mine.toml"
    run = _twill("calibrate", "--from-results", str(RESULTS), "--out", str(out))
    # then
    assert run.returncode == 0, run.stderr
    assert "convert_ops_per_clk" in run.stdout and f"wrote {out}" in run.stdout
    assert load_arch_toml(out).name == "nvidia_h100_80gb_hbm3"
    show = _twill("show", "toy", "--arch", str(out))
    assert show.returncode == 0, show.stderr


def test_cli_without_gpu_or_results_is_one_line_and_status_2(tmp_path):
    """No nvidia-smi on PATH and no --from-results: one clear error line, exit status 2."""
    # when
    run = _twill("calibrate", "--out", str(tmp_path / "x.toml"), path=str(tmp_path))
    # then
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("twill: error: no NVIDIA GPU found")
    assert not (tmp_path / "x.toml").exists()
