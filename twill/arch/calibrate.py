"""Calibration: turn the GPU microbenchmarks' results into an arch TOML whose costs are measured.

Stage: beside the pipeline. ``bench/gpu/run_suite.py`` measures a GPU and writes
``{wgmma,tma,pipes,sync}.json``; this module reads them, derives one number per arch fact the cost
model uses (``derive``), and writes a copy of a base arch with those facts replaced
(``calibrated_toml``). Invariants: only measurements whose self-check passed are used (a failed or
missing one raises ``CalibrationError``); every replaced fact cites its result file, the GPU, the
date and how the number was derived, and keeps the base value as ``datasheet = { value, source }``;
facts the suite does not measure are copied from the base unchanged. Pure Python: the tests run it
on the recorded results in ``bench/results/h100``.

Cycle conventions: per-SM numbers (tensor, MUFU, FP32, ALU rates; latencies; synchronisation) are in
SM cycles and hold at any clock. Memory-side numbers (TMA bandwidth and latency) were measured at
the benchmark's clock but are fixed in time, so they are converted to cycles at the calibrated
``clock_mhz``: the sustained SM clock with every tensor core busy (Hopper drops from its 1980 MHz
boost towards 1.6 GHz at the 700 W limit).
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twill.errors import TwillError

__all__ = ["CalibrationError", "Measurement", "BENCHES", "load_results", "load_base", "derive", "calibrated_toml",
           "datasheet_toml", "fit_line", "run_suite", "gpu_name", "suite_script", "default_name"]

BENCHES = ("wgmma", "tma", "pipes", "sync")
OPTIONAL_BENCHES = ("smem", "tma_loaded", "fa_consumer")  # read when present (older results lack them)
# try_wait's suspend-time hint of the unquantized TMA latency records (CUTLASS's 0x989680 ns)
SUSPEND_HINT_NS = 10_000_000
SECTION_ORDER = ("chip", "limits", "units", "rates", "latencies", "sync", "features")


class CalibrationError(TwillError):
    """Calibration cannot run or its inputs are unusable (no GPU, missing or failed measurements)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One arch fact derived from the results: ``[section] key = value``, and how it was derived."""

    section: str
    key: str
    value: float | int
    how: str        # the derivation, in words, with the raw numbers it used
    bench: str      # the result file it came from (wgmma, tma, pipes, sync, smem)
    derived_from_reference: bool = False  # measured on the reference GPU, not on this one (source tag I)


# ---- reading ----------------------------------------------------------------------------------
def load_results(results_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Read ``{wgmma,tma,pipes,sync}.json`` from ``results_dir``.

    Raises
    ------
    CalibrationError
        A file is missing or not JSON.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise CalibrationError(f"{root}: no such results folder; run bench/gpu/run_suite.py --out {root} first")
    out: dict[str, dict[str, Any]] = {}
    for bench in (*BENCHES, *OPTIONAL_BENCHES):
        path = root / f"{bench}.json"
        try:
            out[bench] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if bench in OPTIONAL_BENCHES:
                continue
            raise CalibrationError(f"{path}: missing; the calibration needs {', '.join(BENCHES)}") from None
        except json.JSONDecodeError as err:
            raise CalibrationError(f"{path}: not valid JSON ({err})") from err
    return out


def _records(results: Mapping[str, dict], bench: str, **match: Any) -> list[dict]:
    """The passed records of ``bench`` whose fields equal ``match``; raises if there are none."""
    found = [r for r in results[bench].get("records", []) if all(r.get(k) == v for k, v in match.items())]
    if not found:
        raise CalibrationError(f"{bench}.json: no measurement with {match}; rerun bench/gpu/run_suite.py")
    failed = [r for r in found if not r.get("ok")]
    if failed:
        raise CalibrationError(f"{bench}.json: the measurement with {match} failed its self-check; "
                               "a failed check reports no time (see its record)")
    return found


def _one(results: Mapping[str, dict], bench: str, **match: Any) -> dict:
    return _records(results, bench, **match)[0]


def fit_line(points: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = intercept + slope * x``; returns ``(intercept, slope)``.

    Examples
    --------
    >>> fit_line([(1, 3), (2, 5), (4, 9)])
    (1.0, 2.0)
    """
    pts = list(points)
    if len(pts) < 2:
        raise CalibrationError(f"a line needs two points, got {len(pts)}")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return my - slope * mx, slope


# ---- deriving ---------------------------------------------------------------------------------
def derive(results: Mapping[str, dict], reference: Mapping[str, dict] | None = None,
           warpgroup_rates: bool = False) -> list[Measurement]:
    """One ``Measurement`` per arch fact the suite measures.

    ``reference``: the results of another GPU with the same SM (the H200 for the H100), used for
    facts that ``results`` measured with a since-fixed method: the TMA latency of results recorded
    before issue 21 sits on the wait loop's ~187-cycle poll grid, so it is taken from the reference's
    unquantized records (tagged I, derived, not measured on this GPU).

    ``warpgroup_rates``: also the five rates of one warpgroup's softmax steps beside another
    warpgroup's wgmmas (``fa_consumer.json``), which the cost model charges in place of the per-SM
    pipe rates wherever an arch has them. Off by default: with them the model ranks FA3's order (its
    kernel under the wgmma warp cap measured 1.16x its II) ahead of fa_opt's structure, which the H200
    runs faster (docs/benchmarks.md, "The FlashAttention consumer's register work"), so
    ``archs/h200.toml`` does not carry them and ``bench/codegen/h200_warpgroup_rates.toml`` does.

    Raises
    ------
    CalibrationError
        A needed measurement is missing or failed its check.
    """
    m: list[Measurement] = []

    def add(section: str, key: str, value: float | int, how: str, bench: str, from_reference: bool = False) -> None:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 16.0 -> 16: whole numbers read as such in the TOML and in `twill archs`
        m.append(Measurement(section=section, key=key, value=value, how=how, bench=bench,
                             derived_from_reference=from_reference))

    # -- clock: the sustained SM clock with every tensor core busy
    sus = _one(results, "wgmma", kind="sustained")
    clock = float(sus["sm_clock_mhz"]["median"])
    add("chip", "clock_mhz", round(clock),
        f"sustained SM clock with every SM's tensor cores busy for {sus['launches']} launches of "
        f"{sus['iters']} wgmma m64n{sus['n']}k16 per warpgroup ({sus['warpgroups']} warpgroups, random fp16): "
        f"median of clock64/globaltimer per CTA, {clock:.0f} MHz (range {sus['sm_clock_mhz']['min']:.0f}-"
        f"{sus['sm_clock_mhz']['max']:.0f}); the boost clock {_probe_clock(results):.0f} MHz holds only while "
        "the chip is under its power limit", "wgmma")
    device = results["wgmma"]["device"]
    add("chip", "sms", int(device["sms"]), "cudaDeviceProp.multiProcessorCount", "wgmma")
    if device.get("l2_bytes"):
        add("chip", "l2_mb", round(int(device["l2_bytes"]) / 2**20),
            f"cudaDeviceProp.l2CacheSize = {int(device['l2_bytes'])} bytes", "wgmma")

    # -- tensor cores: sustained fp16 rate; bf16 and fp8 scaled by their measured ratio to fp16
    fp16 = float(sus["flops_per_clk_per_sm"])
    add("rates", "tensor_flops_per_clk_fp16", round(fp16),
        f"{fp16:.1f} FLOP/clk/SM sustained over ~1 s (wgmma m64n256k16 SS, 2 warpgroups, chains of 8 into one "
        f"accumulator); short runs: {_rate_summary(results, 'fp16')}", "wgmma")
    for dtype, key in (("bf16", "tensor_flops_per_clk_bf16"), ("fp8_e4m3", "tensor_flops_per_clk_fp8")):
        ratio = statistics.median(_rate(results, dtype, n) / _rate(results, "fp16", n) for n in (64, 128, 256))
        add("rates", key, round(fp16 * ratio),
            f"{ratio:.4f} x the sustained fp16 rate: the median {dtype}/fp16 ratio of identical short runs "
            f"(N = 64, 128, 256, 2 warpgroups); short runs: {_rate_summary(results, dtype)}", "wgmma")

    # -- wgmma latency beyond its busy time, at the tile shape FlashAttention's QK^T uses
    lat = _one(results, "wgmma", kind="latency", n=128, dtype="fp16", a_source="SS")
    busy = 128 / 2 * 4096 / fp16 if fp16 else 64.0
    rs = _one(results, "wgmma", kind="latency", n=128, dtype="fp16", a_source="RS")
    add("latencies", "mma", round(lat["cycles_per_wgmma"] - busy),
        f"issue-to-complete of one wgmma m64n128k16 SS (fence, wgmma, commit, wait_group 0, repeated) "
        f"{lat['cycles_per_wgmma']:.1f} cycles minus its {busy:.1f} busy cycles; RS: {rs['cycles_per_wgmma']:.1f}; "
        f"N=64/256 SS: {_lat(results, 64):.1f}/{_lat(results, 256):.1f}", "wgmma")

    # -- MUFU, FP32, ALU and the FP32->FP16 pack
    pipes = {r["op"]: r for r in _records(results, "pipes", kind="throughput") if r["with"] == "none"}
    lats = {r["op"]: r for r in _records(results, "pipes", kind="latency")}
    threads = pipes["ex2"]["threads_per_cta"]
    for op, key, unit in (("ex2", "mufu_ops_per_clk", "MUFU.EX2"), ("ffma", "fp32_ops_per_clk", "FFMA"),
                          ("fmnmx", "alu_ops_per_clk", "FMNMX"), ("cvt_f16x2", "convert_ops_per_clk",
                                                                  "F2FP.F16.F32.PACK_AB")):
        rate = float(pipes[op]["ops_per_clk_per_sm"])
        how = (f"{rate:.2f} {unit} instructions' results per clock per SM ({threads} threads per SM, 8 independent "
               "chains each)")
        if op == "cvt_f16x2":
            how += f"; bf16x2 {pipes['cvt_bf16x2']['ops_per_clk_per_sm']:.2f}; {_pairing(results)}"
        add("rates", key, round(rate, 1), how, "pipes")
    for op, key in (("ex2", "mufu"), ("ffma", "fp32")):
        cyc = float(lats[op]["cycles_per_op"])
        add("latencies", key, round(cyc), f"dependent chain of {lats[op]['iters']} {op} in one warp: {cyc:.2f} "
            "cycles per instruction", "pipes")

    # -- TMA: bandwidth when every SM loads the same tiles at once (the built-in programs' pattern:
    # a GEMM's A/B panels and FlashAttention's K/V tiles are read by many concurrently running CTAs),
    # latency of an isolated load
    bench_clock = statistics.median(float(r["sm_clock_mhz"]["median"])
                                    for r in _records(results, "tma", kind="throughput"))
    scale = bench_clock / clock
    lock = [r for r in _records(results, "tma", kind="throughput", pattern="lockstep") if r["bytes"] >= 32768]
    shared = statistics.median(float(r["bytes_per_clk_per_sm"]["median"]) for r in lock)
    stag = [r for r in _records(results, "tma", kind="throughput", pattern="staggered")
            if r["ctas"] > 1 and r["bytes"] >= 16384]
    distinct = statistics.median(float(r["bytes_per_clk_per_sm"]["median"]) for r in stag)
    add("rates", "tma_bytes_per_clk", round(shared * scale, 1),
        f"{shared:.1f} B/clk/SM at {bench_clock:.0f} MHz with one CTA per SM and every SM loading the same tiles of "
        f"an L2-resident region at about the same time (32-64 KiB boxes, 192 KiB in flight, median), "
        f"x {bench_clock:.0f}/{clock:.0f} MHz: L2 bandwidth is fixed in time, not in SM cycles. The built-in programs "
        f"share tiles this way (GEMM panels, FlashAttention K/V); distinct tiles on every SM: {distinct:.1f} B/clk/SM "
        f"(tma_bytes_per_clk_distinct); one SM alone: {_one_sm(results):.1f} B/clk", "tma")
    add("rates", "tma_bytes_per_clk_distinct", round(distinct * scale, 1),
        f"{distinct:.1f} B/clk/SM at {bench_clock:.0f} MHz with one CTA per SM streaming distinct tiles of an 8 MiB "
        f"L2-resident region (16-64 KiB boxes, median), x {bench_clock:.0f}/{clock:.0f} MHz (informational: the "
        "L2 bound when no tile is shared; the cost model reads tma_bytes_per_clk)", "tma")
    stream = [r for r in _records(results, "tma", kind="throughput", pattern="stream") if r["ctas"] > 1]
    hbm_per_sm = statistics.median(float(r["bytes_per_clk_per_sm"]["median"]) for r in stream)
    gbs = max(float(r["gpu_gbytes_per_s_lower_bound"]) for r in stream)
    add("rates", "tma_bytes_per_clk_hbm", round(hbm_per_sm * scale, 1),
        f"{hbm_per_sm:.1f} B/clk/SM at {bench_clock:.0f} MHz streaming a 2 GiB tensor from HBM on every SM, "
        f"x {bench_clock:.0f}/{clock:.0f} MHz (informational: the cost model reads tma_bytes_per_clk)", "tma")
    add("chip", "hbm_tbps", round(gbs / 1e3, 2), f"{gbs:.0f} GB/s read by TMA on every SM at once (bytes over the "
        "slowest CTA's time)", "tma")
    if "tma_loaded" in results:
        _tma_loaded(results, clock, bench_clock, shared * scale, round(fp16), add)
    else:
        _tma_latency(results, reference, clock, bench_clock, add)

    # -- synchronisation between warp groups
    hand = {int(r["bytes"]): float(r["cycles_per_iter"]) for r in _records(results, "sync", kind="handoff")
            if r.get("poll", "try_wait") == "try_wait"}
    if 0 not in hand or len(hand) < 3:
        raise CalibrationError("sync.json: the hand-off sweep needs 0 bytes and at least two sizes")
    add("sync", "mbarrier", round(hand[0] / 2, 1),
        f"half the round trip of an empty hand-off between two warpgroups (full/empty mbarriers, one arrival per "
        f"warp, try_wait): {hand[0]:.1f} cycles; with a token stored and checked each way: "
        f"{_mbar_token(results):.1f}", "sync")
    fixed, per_kib = fit_line((b / 1024, t - hand[0]) for b, t in hand.items() if b)
    sweep = ", ".join(f"{b // 1024} KiB {t:.0f}" for b, t in sorted(hand.items()) if b)
    add("sync", "handoff_fixed", round(fixed, 1),
        f"intercept of (round trip with B bytes - empty round trip) vs B, registers -> SMEM -> registers between "
        f"two warpgroups, 16-byte accesses ({sweep} cycles per round trip; empty {hand[0]:.0f})", "sync")
    hinted = {int(r["bytes"]): float(r["cycles_per_iter"]) for r in results["sync"].get("records", [])
              if r.get("kind") == "handoff" and r.get("poll") == "try_wait_hint" and r.get("ok")}
    note = ""
    if 0 in hinted and len(hinted) >= 3:
        hf, hs = fit_line((b / 1024, t - hinted[0]) for b, t in hinted.items() if b)
        note = (f"; waiting with try_wait's suspend hint (CUTLASS): empty {hinted[0]:.0f}, {hf:.1f} + {hs:.2f}/KiB "
                "(informational)")
    add("sync", "handoff_per_kib", round(per_kib, 2), f"slope of the same fit ({per_kib:.2f} cycles per KiB){note}",
        "sync")
    bar = _one(results, "sync", kind="bar_sync", threads=256)
    bar384 = _one(results, "sync", kind="bar_sync", threads=384)
    ping = _one(results, "sync", kind="bar_pingpong")
    add("sync", "named_barrier", round(float(bar["cycles_per_iter"]), 1),
        f"bar.sync with 256 threads arriving together: {bar['cycles_per_iter']:.1f} cycles (384 threads: "
        f"{bar384['cycles_per_iter']:.1f}; bar.arrive/bar.sync ping-pong between two warpgroups: "
        f"{ping['cycles_per_iter']:.1f} per round trip)", "sync")
    wait = _one(results, "sync", kind="wait_issue")
    add("sync", "wait_issue", round(float(wait["cycles_per_iter"]), 1),
        f"an mbarrier try_wait that finds its phase complete and the branch on its result, one after another "
        f"({wait['iters']} in a row): {wait['cycles_per_iter']:.1f} cycles each", "sync")
    if "smem" in results:
        _smem(results, add)
    elif reference is not None and "smem" in reference:
        _smem(reference, add, from_reference=True)
    if warpgroup_rates and "fa_consumer" in results:
        _warpgroup_steps(results, add)
        _wgmma_issue(results, add)
    return m


def _is_unquantized(r: Mapping[str, Any]) -> bool:
    """A TMA latency record timed with try_wait's suspend hint and no diagnostic mode (issue 21)."""
    return (r.get("kind") == "latency" and int(r.get("suspend_hint_ns", 0)) >= SUSPEND_HINT_NS // 10
            and not any(r.get(k) for k in ("watch", "dither", "busy", "legacy_loop")))


def _l2_latency_points(results: Mapping[str, dict]) -> tuple[list[dict], bool]:
    """Isolated L2 loads, unswizzled, >= 16 KiB: the unquantized records if there are any, else the old ones."""
    recs = [r for r in results["tma"].get("records", []) if r.get("kind") == "latency" and r.get("source") == "L2"
            and r.get("poll") == "try_wait" and not r.get("swizzle_128b") and r.get("bytes", 0) >= 16384]
    fixed = [r for r in recs if _is_unquantized(r)]
    chosen = fixed or [r for r in recs if "suspend_hint_ns" not in r
                       or (r.get("legacy_loop") and not r.get("dither") and not r.get("suspend_hint_ns"))]
    if not chosen:
        raise CalibrationError("tma.json: no isolated L2 latency measurement; rerun bench/gpu/run_suite.py")
    if not all(r.get("ok") for r in chosen):
        raise CalibrationError("tma.json: an L2 latency measurement failed its self-check; a failed check reports "
                               "no time (see its record)")
    return sorted(chosen, key=lambda r: r["bytes"]), bool(fixed)


def _percentile(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def _tma_latency(results: Mapping[str, dict], reference: Mapping[str, dict] | None, clock: float,
                 bench_clock: float, add) -> None:
    """``latencies.tma``: the intercept of latency vs size of one isolated load from L2."""
    pts, fixed = _l2_latency_points(results)
    source, from_ref = results, False
    if not fixed and reference is not None:
        ref_pts, ref_fixed = _l2_latency_points(reference)
        if ref_fixed:
            source, pts, from_ref = reference, ref_pts, True
    src_clock = statistics.median(float(r["sm_clock_mhz"]["median"])
                                  for r in source["tma"]["records"] if r.get("kind") == "throughput")
    intercept, slope = fit_line((r["bytes"] / 1024, float(r["cycles"]["median"])) for r in pts)
    if fixed or from_ref:
        dist = "; ".join(
            f"{r['bytes'] // 1024} KiB p10/p50/p90 {_percentile(r['cycles_raw'], .1):.0f}/"
            f"{_percentile(r['cycles_raw'], .5):.0f}/{_percentile(r['cycles_raw'], .9):.0f} "
            f"({len(set(r['cycles_raw']))} distinct values in {len(r['cycles_raw'])})" for r in pts)
        legacy = [r for r in source["tma"]["records"] if r.get("kind") == "latency" and r.get("legacy_loop")
                  and r.get("source") == "L2" and r.get("poll") == "try_wait" and not r.get("swizzle_128b")
                  and not r.get("dither") and r.get("bytes", 0) >= 16384 and r.get("ok")]
        was = ", ".join(f"{r['cycles']['median']:.0f}" for r in sorted(legacy, key=lambda r: r["bytes"]))
        gaps = sorted({float(r["last_fail_gap"]["median"]) for r in source["tma"]["records"]
                       if r.get("kind") == "latency" and r.get("ok") and not r.get("legacy_loop")
                       and not r.get("suspend_hint_ns") and "last_fail_gap" in r})
        grid = f" ({gaps[0]:.0f}-{gaps[-1]:.0f} cycles between polls measured)" if gaps else ""
        how = (f"intercept of issue-to-mbarrier-complete latency vs size of one isolated load from L2, the waiting "
               f"thread suspended by try_wait with CUTLASS's suspend hint (10 ms) so that it resumes when the phase "
               f"completes ({dist}; {intercept:.0f} + {slope:.1f}/KiB at {src_clock:.0f} MHz), x {clock:.0f}/"
               f"{src_clock:.0f} MHz. Polled without the hint, a pending mbarrier answers only every ~180-220 "
               f"cycles{grid}, so the first runs' loop saw completions on that grid"
               + (f" (rebuilt here: {was} cycles for the same sizes)" if was else "") + " (issue 21)")
        if from_ref:
            ref_gpu = reference["tma"].get("device", {}).get("name", "the reference GPU")
            own = ", ".join(f"{r['bytes'] // 1024} KiB {r['cycles']['median']:.0f}"
                            for r in _l2_latency_points(results)[0])
            how = (f"derived, not measured on this GPU: {ref_gpu}'s measurement, same GH100 SM and TMA. This GPU's "
                   f"own records are quantized ({own} cycles), and the unchanged suite gave the same three numbers "
                   f"on the H200 (issue 21), within one poll period of the H200's unquantized ones: " + how)
        add("latencies", "tma", round(intercept * clock / src_clock), how, "tma", from_ref)
        return
    pts_text = ", ".join(f"{r['bytes'] // 1024} KiB {r['cycles']['median']:.0f}" for r in pts)
    add("latencies", "tma", round(intercept * clock / bench_clock),
        f"intercept of issue-to-mbarrier-complete latency vs size of one isolated load from L2 ({pts_text} cycles at "
        f"{bench_clock:.0f} MHz; {intercept:.0f} + {slope:.1f}/KiB), x {clock:.0f}/{bench_clock:.0f} MHz; QUANTIZED: "
        "these records lie on the wait loop's ~187-cycle poll grid (issue 21), recalibrate or pass a reference",
        "tma")


def _gemm_pace_cycles(rec: Mapping[str, Any], flops_per_clk: float) -> float:
    """SM cycles of the MMA of one K step of the benchmark's GEMM tile at the measured tensor-core rate."""
    return 2 * int(rec["block_m"]) * int(rec["block_n"]) * int(rec["block_k"]) / flops_per_clk


def _loaded_at_pace(results: Mapping[str, dict], clock: float, flops_per_clk: float) -> dict:
    """The loaded-latency record of the largest tile paced at its MMA's time at ``clock`` (within 2%), every SM
    loading, from the deepest ring whose pace held (steps within 2% of the pace): the condition a GEMM's loads
    meet when the tensor cores set the pace."""
    recs = [r for r in results["tma_loaded"].get("records", []) if r.get("kind") == "loaded_latency"
            and r.get("ctas", 1) > 1 and r.get("pace_ns", 0) > 0]
    if not recs or not all(r.get("ok") for r in recs):
        raise CalibrationError("tma_loaded.json: a loaded-latency measurement is missing or failed its self-check; "
                               "rerun bench/gpu/run_suite.py --only tma_loaded")
    block_n = max(int(r["block_n"]) for r in recs)
    widest = [r for r in recs if int(r["block_n"]) == block_n]
    want_ns = _gemm_pace_cycles(widest[0], flops_per_clk) / clock * 1e3
    held = [r for r in widest if abs(r["pace_ns"] - want_ns) <= 0.02 * want_ns
            and float(r["cycles_per_step"]["median"]) <= 1.02 * r["pace_cycles"]]
    if not held:
        raise CalibrationError(f"tma_loaded.json: no ring of {block_n}-column tiles held the MMA's pace of "
                               f"{want_ns:.0f} ns per step; the loads cannot keep up, so no latency is derived")
    return max(held, key=lambda r: int(r["depth"]))


def _tma_loaded(results: Mapping[str, dict], clock: float, tma_clock: float, rate: float, flops_per_clk: float,
                add) -> None:
    """``latencies.tma`` from loads under load: the median time from the A tile's issue to the B tile's landing
    in a GEMM's K loop on every SM at the tensor cores' pace, in cycles at ``clock``, less the model's transfer
    time for both tiles at ``rate`` (``tma_bytes_per_clk``): the cost model's ``busy + latency`` of the pair then
    equals what the ring's consumer waits for. The isolated load's intercept (tma.json, measured at
    ``tma_clock``) is given beside it. The tile pattern's own facts, which loads declared ``sharing="panel"``
    (the gemm program's A and B panels; ``CostModel.tma``) are charged at: the saturated L2 feed
    (``tma_bytes_per_clk_gemm``) and the landing time a ring must cover (``latencies.tma_gemm``, see
    ``_tma_gemm_tail``)."""
    rec = _loaded_at_pace(results, clock, flops_per_clk)
    mhz = float(rec["sm_clock_mhz"]["median"])
    pair = int(rec["bytes_a"]) + int(rec["bytes_b"])
    land = float(rec["latency_b_cycles"]["median"]) * clock / mhz
    pct_b, pct_a = rec["latency_b_percentiles"], rec["latency_a_percentiles"]
    same_tile = [r for r in results["tma_loaded"]["records"] if r.get("ok") and r["block_n"] == rec["block_n"]]
    alone = [r for r in same_tile if r.get("ctas") == 1]
    alone_txt = (f"; one CTA alone, same loads: B lands {alone[0]['latency_b_cycles']['median']:.0f} cycles after "
                 f"A's issue at {alone[0]['sm_clock_mhz']['median']:.0f} MHz" if alone else "")
    iso, unquantized = _l2_latency_points(results)
    iso_txt = ""
    if unquantized:
        icpt, _ = fit_line((r["bytes"] / 1024, float(r["cycles"]["median"])) for r in iso)
        iso_txt = (f". An isolated load from L2 (tma.json): intercept {icpt:.0f} cycles at {tma_clock:.0f} MHz, "
                   f"{icpt * clock / tma_clock:.0f} at {clock:.0f} MHz; a ring planned on it is too shallow under "
                   "load (docs/codegen.md: the GEMM kernels ran at 1.4-3.1 x II)")
    add("latencies", "tma", round(land - pair / rate),
        f"TMA latency under load (bench/gpu/tma_loaded.cu): every SM runs the K loop of an 8192^3 fp16 GEMM's first "
        f"two waves (128 x {rec['block_n']} tiles, K step 64, raster order, A panels shared along a tile row, B along "
        f"a column), a ring of {rec['depth']} slots, each step held for the MMA's time ({rec['pace_ns']} ns = "
        f"{_gemm_pace_cycles(rec, flops_per_clk):.0f} cycles at {clock:.0f} MHz; measured "
        f"{float(rec['cycles_per_step']['median']):.0f} cycles per step at {mhz:.0f} MHz): the B tile lands "
        f"{float(rec['latency_b_cycles']['median']):.0f} cycles after the A tile's issue (median of "
        f"{rec['latency_b_cycles']['n']}; p10/p90/p99 {pct_b['p10']}/{pct_b['p90']}/{pct_b['p99']}; the A tile's own "
        f"p10/p50/p90 {pct_a['p10']}/{pct_a['p50']}/{pct_a['p90']}), x {clock:.0f}/{mhz:.0f} MHz = {land:.0f}, less "
        f"both tiles' {pair // 1024} KiB at tma_bytes_per_clk ({pair / rate:.0f}){alone_txt}{iso_txt}", "tma_loaded")
    sat = [r for r in same_tile if r.get("ctas", 1) > 1 and r.get("pace_ns") == 0]
    if sat:
        r = sat[0]
        per_clk = (int(r["bytes_a"]) + int(r["bytes_b"])) / float(r["cycles_per_step"]["median"])
        r_mhz = float(r["sm_clock_mhz"]["median"])
        add("rates", "tma_bytes_per_clk_gemm", round(per_clk * r_mhz / clock, 1),
            f"{per_clk:.1f} B/clk/SM at {r_mhz:.0f} MHz: the same GEMM loads with the ring released at once (no MMA "
            f"pace), every SM, {r['depth']} slots, x {r_mhz:.0f}/{clock:.0f} MHz. The L2 feed under a GEMM's tile "
            "sharing saturates here, well below tma_bytes_per_clk (every SM on the same tiles); loads declared "
            "sharing panel (programs/gemm.py's A and B) are charged at it", "tma_loaded")
        _tma_gemm_tail(rec, clock, per_clk * r_mhz / clock, add)


def _tma_gemm_tail(rec: dict, clock: float, feed: float, add) -> None:
    """``latencies.tma_gemm``: the p99 landing of the GEMM-pace record less both tiles at the GEMM feed.

    Why the tail and not the median: a ring is consumed in order, so every landing later than the slack its
    depth gives stalls the consumer, and near the feed's saturation the landing time's tail is long (p99 is
    about twice the median). Planned on the p99, a ring stalls on about one load in a hundred. Measured against
    kernels on the H200 (docs/benchmarks_notes.md, "The GEMM's L2 feed, its tail and the retire"): 128x128
    GEMM kernels whose rings were planned on the median landing at the feed ran 7-10% slower than those planned
    on the p99, which ran at 0.89-0.91 x their II.
    """
    mhz = float(rec["sm_clock_mhz"]["median"])
    p99 = float(rec["latency_b_percentiles"]["p99"])
    pair = int(rec["bytes_a"]) + int(rec["bytes_b"])
    land = p99 * clock / mhz
    add("latencies", "tma_gemm", round(land - pair / feed),
        f"the landing a ring must cover under a GEMM's traffic (bench/gpu/tma_loaded.cu, the record "
        f"latencies.tma reads: 128 x {rec['block_n']} tiles, ring of {rec['depth']}, the MMA's pace): the B tile "
        f"lands {p99:.0f} cycles after the A tile's issue at the 99th percentile ({rec['latency_b_cycles']['n']} "
        f"landings; median {float(rec['latency_b_cycles']['median']):.0f}) at {mhz:.0f} MHz, x {clock:.0f}/{mhz:.0f} "
        f"MHz = {land:.0f}, less both tiles' {pair // 1024} KiB at tma_bytes_per_clk_gemm ({pair / feed:.0f}). "
        "In-order consumption stalls on every landing past the ring's slack, so the ring covers the tail "
        "(twill/arch/calibrate.py _tma_gemm_tail)", "tma_loaded")


def _smem(results: Mapping[str, dict], add, from_reference: bool = False) -> None:
    """Shared-memory bandwidth per SM (LSU accesses) and what is left of it beside wgmma's operand reads.

    ``from_reference``: ``results`` are another GPU's with the same SM (the H200's for the H100, whose
    suite predates smem.cu): the SMEM path and the tensor cores are the SM's, so the rates carry over,
    tagged I. Without them the arch would charge a register hand-off between groups no copy at all
    (``CostModel.handoff_copy``), a modelling error the solver exploits (issue 21)."""
    alone = [r for r in _records(results, "smem", kind="alone") if r["mem_warps"] >= 16]
    best: dict[str, float] = {}
    for r in alone:
        best[r["op"]] = max(best.get(r["op"], 0.0), float(r["smem_bytes_per_clk_per_sm"]["median"]))
    peak = statistics.median(best.values())
    ops = ", ".join(f"{op} {v:.1f}" for op, v in best.items())
    both = _records(results, "smem", kind="with_wgmma")
    mma_alone = next(r for r in both if r["op"] == "none")
    loads = [r for r in both if r["op"] in ("ld.shared.v4", "ldmatrix.x4")]
    beside = statistics.median(float(r["smem_bytes_per_clk_per_sm"]["median"]) for r in loads)
    mma_with = statistics.median(float(r["wgmma_flops_per_clk_per_sm"]["median"]) for r in loads)
    opnd = statistics.median(float(r["wgmma_operand_bytes_per_clk_per_sm"]["median"]) for r in loads)
    alone12 = {r["op"]: float(r["smem_bytes_per_clk_per_sm"]["median"])
               for r in _records(results, "smem", kind="alone") if r["mem_warps"] == 12}
    derived = ""
    if from_reference:
        gpu = results["smem"].get("device", {}).get("name", "the reference GPU")
        derived = (f"derived, not measured on this GPU: {gpu}'s measurement, same GH100 SM (shared memory and "
                   "tensor cores are per SM; the chips differ in HBM and clocks, not here): ")
    add("rates", "smem_bytes_per_clk", round(peak, 1),
        derived + "shared-memory bytes per SM clock moved by ld/st.shared.v4, ldmatrix.x4 and stmatrix.x4 (16-32 "
        f"warps of one CTA per SM, 512 B per warp instruction, no bank conflicts): median of each kind's best, {ops}", "smem",
        from_reference)
    add("rates", "smem_bytes_per_clk_beside_wgmma", round(beside, 1),
        derived + f"the same loads (12 warps; alone {', '.join(f'{k} {v:.1f}' for k, v in alone12.items())}) while a "
        f"warpgroup runs wgmma m64n64k16 SS fp16 back to back: {beside:.1f} B/clk, and the wgmmas keep {mma_with:.0f} of "
        f"their {float(mma_alone['wgmma_flops_per_clk_per_sm']['median']):.0f} FLOP/clk alone ({opnd:.0f} B/clk of "
        f"SMEM operands counted at 4 KiB per instruction). Operand reads and LSU accesses together moved "
        f"{opnd + beside:.0f} B/clk, more than the LSU path's {peak:.0f}: wgmma's operand reads do not draw on the "
        "LSU budget, they take priority over it" + _bulk_beside_wgmma(results)
        + ". The cost model charges a register hand-off between groups its store and load at this rate, on "
        "the issuing groups (CostModel.handoff_copy)", "smem", from_reference)


# One warpgroup's softmax steps (bench/gpu/fa_consumer.cu) -> [rates] key and the unit of work it counts:
# (step, key, work per 64 x 128 tile, what the work is). The cost model reads each key where the arch has it.
WARPGROUP_STEPS = (
    ("ex2", "mufu_ops_per_clk_warpgroup", 8192, "exp2 results (an FFMA and a MUFU.EX2 each)"),
    ("rescale", "fp32_ops_per_clk_warpgroup", 8192, "independent FMUL results"),
    ("cast", "convert_ops_per_clk_warpgroup", 4096, "F2FP.F16.F32.PACK_AB instructions (two elements each)"),
    ("row_max", "alu_reduce_ops_per_clk_warpgroup", 8192,
     "elements reduced by the row max (two 32-deep FMNMX chains per thread, two shuffle stages, the running max)"),
    ("row_sum", "fp32_reduce_ops_per_clk_warpgroup", 8192,
     "elements reduced by the row sum (two 32-deep FADD chains per thread, two shuffle stages, l * alpha + sum)"),
)


def _warpgroup_steps(results: Mapping[str, dict], add) -> None:
    """The rate at which one warpgroup (4 warps, one per SM sub-partition) issues each softmax step while
    another warpgroup's wgmmas run on the tensor cores: the situation of every softmax step of a
    two-consumer FlashAttention schedule. The per-SM pipe rates above are measured with 32 warps per SM;
    one warp per sub-partition cannot hide the chains' latency, and the tensor cores' work slows its
    register work further (SS-only wgmmas alike, so not the RS operand reads)."""
    steps = {(r["step"], r["mode"]): r for r in _records(results, "fa_consumer", kind="step")}
    sustained = float(_one(results, "wgmma", kind="sustained")["flops_per_clk_per_sm"])
    loops = {(r["warpgroups"], r["stamped"]): float(r["cycles"]) for r in _records(results, "fa_consumer",
                                                                                    kind="consumer_loop")}
    for step, key, work, what in WARPGROUP_STEPS:
        cyc = {mode: float(steps[(step, mode)]["cycles"]) for mode in ("alone", "beside_wgmma", "beside_wgmma_ss",
                                                                       "pair")}
        beside = steps[(step, "beside_wgmma")]
        kept = float(beside["partner_flops_per_clk"]["median"])
        starved = (f"; this step issues so densely that it starved the partner's wgmma issue (it kept {kept:.0f} "
                   "FLOP/clk), so the number is close to alone and may undercharge the step beside queued wgmmas"
                   if kept < 0.5 * sustained else "")
        add("rates", key, round(work / cyc["beside_wgmma"], 2),
            f"{work / cyc['beside_wgmma']:.2f} {what} per clock from one warpgroup while another warpgroup streams "
            f"8 RS + 8 SS wgmma m64n128k16 (kept {kept:.0f} FLOP/clk): "
            f"{cyc['beside_wgmma']:.1f} cycles per 64 x 128 tile (median of {beside['cycles_per_round']['n']} "
            f"warpgroups x {beside['rounds']} rounds); alone {cyc['alone']:.1f}, beside 16 SS wgmmas "
            f"{cyc['beside_wgmma_ss']:.1f}, two warpgroups on the step at once {cyc['pair']:.1f} each. The "
            f"fa_opt consumer loop with K/V resident: {loops[(1, False)]:.0f} cycles per KV step alone, "
            f"{loops[(2, False)]:.0f} with two consumers taking turns{starved}", "fa_consumer")


def _wgmma_issue(results: Mapping[str, dict], add) -> None:
    """The cycles a warpgroup spends issuing one wgmma (its share of fence, 8 wgmma m64n128k16 and commit)
    while the tensor pipe has room: the consumer that runs the step also keeps its own commit group in
    flight (``own_wgmma_*`` records of fa_consumer.cu; results recorded before 2026-11-28 lack them).
    The model charged one cycle per instruction; Nsight put 15-25 per HGMMA in fa_opt's kernel."""
    own = [r for r in _records(results, "fa_consumer", kind="step") if r["mode"] in ("own_wgmma_ss", "own_wgmma_rs")]
    if not own:
        return
    per = {mode: statistics.median(float(r["own_issue_cycles_per_group"]["median"]) / 8 for r in own
                                   if r["mode"] == mode) for mode in ("own_wgmma_ss", "own_wgmma_rs")}
    beside = [float(r["own_issue_cycles_per_group"]["median"]) / 8 for r in _records(results, "fa_consumer", kind="step")
              if r["mode"] == "own_wgmma_ss_beside_wgmma"]
    queued = (f"; the issue blocks far longer while another warpgroup's wgmmas fill the pipe ({min(beside):.0f}-"
              f"{max(beside):.0f} per instruction: a queueing cost the model's tensor-core unit already serialises, not "
              "an issue cost)" if beside else "")
    add("latencies", "mma_issue", math.ceil(max(per.values())),
        f"cycles from wgmma.fence to wgmma.commit_group for one commit group of 8 wgmma m64n128k16, per "
        f"instruction, issued by a warpgroup that then runs a softmax step while the group is in flight (the "
        f"previous own group retired or nearly so): SS {per['own_wgmma_ss']:.1f}, RS {per['own_wgmma_rs']:.1f} "
        f"(medians of {len(own) // 2} steps x {own[0]['cycles_per_round']['n']} warpgroups x {own[0]['rounds']} "
        f"groups){queued}", "fa_consumer")


def _bulk_beside_wgmma(results: Mapping[str, dict]) -> str:
    """TMA (bulk copy) writes into SMEM beside the same wgmmas, when smem.json measured them."""
    recs = [r for r in results["smem"].get("records", []) if str(r.get("op", "")).startswith("cp.async.bulk")
            and r.get("ok")]
    alone = next((r for r in recs if r["kind"] == "alone"), None)
    both = next((r for r in recs if r["kind"] == "with_wgmma"), None)
    if not (alone and both):
        return ""
    return (f"; one thread's ring of 16 KiB TMA bulk copies from L2 on every SM: "
            f"{float(alone['smem_bytes_per_clk_per_sm']['median']):.1f} B/clk alone, "
            f"{float(both['smem_bytes_per_clk_per_sm']['median']):.1f} beside the wgmmas, which kept "
            f"{float(both['wgmma_flops_per_clk_per_sm']['median']):.0f} FLOP/clk: TMA writes at that rate take "
            "nothing from the operand reads")


def _probe_clock(results: Mapping[str, dict]) -> float:
    probes = [p for p in results["wgmma"].get("clock_probes", []) if p.get("when") == "start"]
    return float(probes[0]["sm_clock_mhz"]["median"]) if probes else float("nan")


def _rate(results: Mapping[str, dict], dtype: str, n: int) -> float:
    return float(_one(results, "wgmma", kind="throughput", dtype=dtype, n=n, a_source="SS",
                      warpgroups=2)["flops_per_clk_per_sm"])


def _rate_summary(results: Mapping[str, dict], dtype: str) -> str:
    return ", ".join(f"N={n} {_rate(results, dtype, n):.0f}" for n in (64, 128, 256))


def _lat(results: Mapping[str, dict], n: int) -> float:
    return float(_one(results, "wgmma", kind="latency", n=n, dtype="fp16", a_source="SS")["cycles_per_wgmma"])


def _one_sm(results: Mapping[str, dict]) -> float:
    return max(float(r["bytes_per_clk_per_sm"]["median"])
               for r in _records(results, "tma", kind="throughput", pattern="staggered", ctas=1))


def _mbar_token(results: Mapping[str, dict]) -> float:
    return float(_one(results, "sync", kind="mbarrier_round_trip", poll="try_wait",
                      between="warpgroups (one arrival per warp, 128 waiters)")["cycles_per_iter"])


def _pairing(results: Mapping[str, dict]) -> str:
    """Whether the pack shares a pipe with ex2, FFMA or FMNMX: a pair's time against its parts'."""
    alone = {r["op"]: float(r["cta_cycles"]["median"])
             for r in _records(results, "pipes", kind="throughput") if r["with"] == "none"}
    words = []
    for r in _records(results, "pipes", kind="pair"):
        if "cvt_f16x2" not in (r["op"], r["with"]):
            continue
        a, b = alone[r["op"]], alone[r["with"]]
        t = float(r["cta_cycles"]["median"])
        share = (t - max(a, b)) / min(a, b)  # 0: overlaps fully, 1: serialises fully
        other = r["with"] if r["op"] == "cvt_f16x2" else r["op"]
        words.append(f"with {other} {100 * share:.0f}% serialised")
    return "issued together with other kinds: " + ", ".join(words)


# ---- writing ----------------------------------------------------------------------------------
def _source(meas: Measurement, results: Mapping[str, dict], results_label: str,
            reference: Mapping[str, dict] | None = None, reference_label: str = "") -> str:
    if meas.derived_from_reference and reference is not None:
        doc = reference[meas.bench]
        gpu = doc.get("device", {}).get("name", "an unnamed GPU")
        date = str(doc.get("date", "undated"))[:10]
        return (f"I: from a measurement on {gpu}, {date}, bench/gpu/{meas.bench}.cu ({reference_label}/"
                f"{meas.bench}.json): {meas.how}")
    doc = results[meas.bench]
    gpu = doc.get("device", {}).get("name", "an unnamed GPU")
    date = str(doc.get("date", "undated"))[:10]
    return f"W: measured on {gpu}, {date}, bench/gpu/{meas.bench}.cu ({results_label}/{meas.bench}.json): {meas.how}"


def calibrated_toml(results: Mapping[str, dict], base: Mapping[str, Any], *, name: str, description: str,
                    results_label: str, reference: Mapping[str, dict] | None = None,
                    reference_label: str = "", warpgroup_rates: bool = False) -> str:
    """The base arch (parsed TOML) with every measured fact replaced, as TOML text.

    Each replaced fact keeps the base's value and source under ``datasheet`` (the base's own
    ``datasheet`` when the base was calibrated before, so the original stays; none when the base's
    value was itself a measurement without one).

    Examples
    --------
    >>> root = Path(__file__).resolve().parents[2]
    >>> text = calibrated_toml(load_results(root / "bench/results/h100"), load_base(root / "archs/h100.toml"),
    ...                        name="my_h100", description="mine", results_label="bench/results/h100")
    >>> tomllib.loads(text)["rates"]["mufu_ops_per_clk"]["value"]
    16
    """
    data = json.loads(json.dumps(base))  # a deep copy of plain TOML data
    data["name"], data["description"] = name, description
    for meas in derive(results, reference, warpgroup_rates):
        table = data.setdefault(meas.section, {})
        old = table.get(meas.key)
        fact: dict[str, Any] = {"value": meas.value,
                                "source": _source(meas, results, results_label, reference, reference_label)}
        if isinstance(old, dict) and "datasheet" in old:
            fact["datasheet"] = old["datasheet"]
        elif (isinstance(old, dict) and "value" in old and not str(old.get("source", "")).startswith("W:")
              and not str(old.get("source", "")).startswith("I: from a measurement on")):
            fact["datasheet"] = {"value": old["value"], "source": old.get("source", "")}
        table[meas.key] = fact
    gpu = results["wgmma"].get("device", {}).get("name", "a GPU")
    header = [f"# {description}",
              f"# Written by `twill calibrate` from the microbenchmarks in {results_label} ({gpu}).",
              "# Measured facts carry a W source and keep the value they replace as `datasheet`;",
              "# the others are copied from the base arch. Source tags: V vendor documentation, P paper,",
              "# C community measurement, W measured on the GPU named, I arithmetic on tagged numbers.",
              "# Regenerate: twill calibrate --from-results DIR --base THIS_FILE --out THIS_FILE (format:",
              "# docs/arch-format.md; how each number is measured: docs/benchmarks.md, H100 calibration)."]
    if reference is not None:
        ref_gpu = reference["tma"].get("device", {}).get("name", "a reference GPU")
        header.append(f"# Facts tagged I were derived from {ref_gpu}'s results ({reference_label}), passed as "
                      f"--reference {reference_label}.")
    return "\n".join(header) + "\n" + _dump(data)


def datasheet_toml(data: Mapping[str, Any], *, name: str, description: str) -> str:
    """The arch as it was before calibration: every fact with a ``datasheet`` takes that value and
    source back, and facts that only a measurement introduced (a W source, no datasheet) are dropped.

    Examples
    --------
    >>> root = Path(__file__).resolve().parents[2]
    >>> old = tomllib.loads(datasheet_toml(load_base(root / "archs/h100.toml"), name="h", description="d"))
    >>> old["chip"]["clock_mhz"]["value"], old["rates"]["convert_ops_per_clk"]["value"]
    (1830, 16)
    """
    out: dict[str, Any] = json.loads(json.dumps(data))
    out["name"], out["description"] = name, description
    for section in ("chip", "limits", "rates", "latencies", "sync", "features"):
        table = out.get(section, {})
        for key, fact in list(table.items()):
            if isinstance(fact, dict) and "datasheet" in fact:
                table[key] = fact["datasheet"]
            elif isinstance(fact, dict) and str(fact.get("source", "")).startswith("W:"):
                del table[key]
    header = [f"# {description}", "# Written by twill.arch.calibrate.datasheet_toml: the calibrated arch with every measured",
              "# fact replaced by the datasheet value it keeps."]
    return "\n".join(header) + "\n" + _dump(out)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise CalibrationError(f"cannot write the non-finite number {v} to TOML")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    raise CalibrationError(f"cannot write {type(v).__name__} to TOML")


def _dump(data: Mapping[str, Any]) -> str:
    lines = [f"{k} = {_value(data[k])}" for k in ("name", "description") if k in data]
    for section in [*SECTION_ORDER, *(k for k in data if k not in SECTION_ORDER and k not in ("name", "description"))]:
        if section not in data:
            continue
        if section == "units":
            for unit, table in data["units"].items():
                lines += ["", f"[units.{unit}]", *(f"{k} = {_value(v)}" for k, v in table.items())]
            continue
        lines += ["", f"[{section}]", *(f"{k} = {_value(v)}" for k, v in data[section].items())]
    return "\n".join(lines) + "\n"


def load_base(path: str | Path) -> dict[str, Any]:
    """The parsed TOML of a base arch file."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise CalibrationError(f"{p}: cannot read the base arch ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise CalibrationError(f"{p}: the base arch is not valid TOML ({err})") from err


# ---- running the suite ----------------------------------------------------------------------------
def suite_script() -> Path:
    """``bench/gpu/run_suite.py`` of this checkout (the suite is CUDA source, not part of the wheel)."""
    script = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "run_suite.py"
    if not script.is_file():
        raise CalibrationError(f"{script}: the microbenchmark suite is missing; run `twill calibrate` from a "
                               "checkout of the twill repository, or pass --from-results DIR")
    return script


def gpu_name() -> str:
    """The first NVIDIA GPU's name from nvidia-smi, or raise when there is none or nvcc is missing."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise CalibrationError("no NVIDIA GPU found (nvidia-smi is not on PATH); run on a machine with an NVIDIA "
                               "GPU and nvcc, or pass --from-results DIR with results of bench/gpu/run_suite.py")
    proc = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    names = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not names:
        raise CalibrationError(f"nvidia-smi lists no GPU ({(proc.stderr or proc.stdout).strip()[:200]}); "
                               "pass --from-results DIR instead")
    if shutil.which("nvcc") is None:
        raise CalibrationError(f"found {names[0]} but no nvcc on PATH; the microbenchmarks are CUDA C++ "
                               "(install the CUDA toolkit, or pass --from-results DIR)")
    return names[0]


def run_suite(out_dir: str | Path) -> Path:
    """Build and run the microbenchmarks on this machine's GPU, writing the results to ``out_dir``.

    The suite targets sm_90a (Hopper: wgmma, TMA, setmaxnreg). Its output goes to this process's
    stdout and stderr as it runs.

    Raises
    ------
    CalibrationError
        No GPU or nvcc, the suite is missing, or a benchmark failed to build or run.
    """
    gpu_name()
    script = suite_script()
    out = Path(out_dir)
    proc = subprocess.run([sys.executable, str(script), "--out", str(out)])
    if proc.returncode != 0:
        raise CalibrationError(f"{script.name} exited with status {proc.returncode}; see its output above and "
                               f"the JSON in {out} (a measurement whose self-check failed reports no time)")
    return out


def default_name(results: Mapping[str, dict]) -> str:
    """An arch name from the GPU's name: 'NVIDIA H100 80GB HBM3' -> 'nvidia_h100_80gb_hbm3'."""
    gpu = str(results["wgmma"].get("device", {}).get("name", "gpu"))
    return "".join(c if c.isalnum() else "_" for c in gpu.lower()).strip("_") or "gpu"
