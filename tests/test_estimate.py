"""Whole-kernel estimates, checked against arithmetic done by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from twill.arch.registry import get_arch
from twill.estimate import (
    causal_iterations,
    estimate_fa_backward,
    estimate_fa_forward,
    estimate_gemm,
    fidelity_band,
    with_band,
)

# The H100 model before calibration (issue 8; tests/data/h100_datasheet.toml, checked against archs/h100.toml by
# tests/test_calibrate.py): the hand-worked cycle counts in this file are its datasheet and proxy costs, so a
# new calibration of the built-in h100 does not rewrite them.
_H100 = str(Path(__file__).resolve().parent / "data" / "h100_datasheet.toml")
H100 = get_arch(_H100)
FA = {"batch": 2, "heads": 16, "seqlen": 8192, "head_dim": 128, "block_m": 128, "block_n": 128}


def test_fa_forward_by_hand():
    e = estimate_fa_forward(H100, 2048, **FA)
    assert (e.ctas, e.waves, e.iterations_per_cta, e.cycles_per_cta) == (2 * 16 * 64, 16, 64, 64 * 2048)
    # 16 waves x 131072 cycles = 2^21 cycles at 1830 MHz
    assert e.seconds == pytest.approx(2**21 / 1.83e9, rel=1e-12)
    assert e.seconds == pytest.approx(1.1459847e-3, rel=1e-7)
    # 4 * 2 * 16 * 8192^2 * 128 = 2^40 FLOP; 2^40 / (2^21 / 1.83e9) = 2^19 * 1.83e9 = 959.44704 TFLOP/s
    assert e.flops == 2.0**40
    assert e.tflops == pytest.approx(959.44704, rel=1e-12)
    # peak: 132 SMs * 4096 FLOP/clk * 1.83 GHz = 989.42976 TFLOP/s; the gap is wave quantisation
    assert e.peak_tflops == pytest.approx(989.42976, rel=1e-12)
    assert e.fraction_of_peak == pytest.approx(2048 / (16 * 132), rel=1e-12)
    text = "\n".join(e.lines())
    assert "16 waves" in text and "959.4 TFLOP/s" in text and "97.0%" in text


def test_prologue_adds_per_wave():
    e = estimate_fa_forward(H100, 2048, prologue_cycles=5000, **FA)
    assert e.cycles_per_cta == 64 * 2048 + 5000
    assert e.seconds == pytest.approx(16 * (64 * 2048 + 5000) / 1.83e9, rel=1e-12)


def test_causal_halves_work_and_iterations():
    # Q block b sees b + 1 key blocks: (1 + ... + 64) / 64 = 32.5 -> 33
    assert causal_iterations(8192, 128, 128) == 33
    e = estimate_fa_forward(H100, 2048, causal=True, **FA)
    assert e.iterations_per_cta == 33 and e.flops == 2.0**39
    assert e.seconds == pytest.approx(16 * 33 * 2048 / 1.83e9, rel=1e-12)


def test_fa_backward_by_hand():
    e = estimate_fa_backward(H100, 3000, **{**FA, "block_m": 64})
    # one CTA per K/V block of 128 rows, looping over Q blocks of 64 rows
    assert (e.ctas, e.waves, e.iterations_per_cta) == (2048, 16, 128)
    assert e.flops == 10 * 2 * 16 * 8192**2 * 128
    assert e.seconds == pytest.approx(16 * 128 * 3000 / 1.83e9, rel=1e-12)
    assert e.tflops == pytest.approx(e.flops / e.seconds / 1e12)


def test_gemm_by_hand():
    e = estimate_gemm(H100, 1024, m=8192, n=8192, k=8192, block_m=128, block_n=256, block_k=64)
    assert (e.ctas, e.waves, e.iterations_per_cta) == (64 * 32, 16, 128)
    assert e.seconds == pytest.approx(16 * 128 * 1024 / 1.83e9, rel=1e-12)
    # 2 * 8192^3 = 2^40 FLOP in 2^21 cycles: the same 959.44704 TFLOP/s as the attention case
    assert e.tflops == pytest.approx(959.44704, rel=1e-12)


def test_rejects_nonsense():
    with pytest.raises(ValueError):
        estimate_gemm(H100, 1024, m=0, n=1, k=1, block_m=1, block_n=1, block_k=1)
    with pytest.raises(ValueError):
        estimate_fa_forward(H100, -1, **FA)


def test_band_from_the_fidelity_table_sets_the_expected_range(tmp_path):
    """An estimate with a fidelity band says what measured kernels of that structure did against it."""
    # given: a fidelity file where such kernels took 1.2x-1.5x the prediction on this arch
    path = tmp_path / "fidelity.json"
    path.write_text('{"h100_datasheet": {"gpu": "GPU X", "source": "test", "fa_fwd": {"measured_over_predicted": '
                    '{"min": 1.2, "max": 1.5}, "kernels": {"a": 1.2, "b": 1.5}}}}')
    e = estimate_fa_forward(H100, 2048, **FA)
    # when
    banded = with_band(e, "fa_fwd", path)
    # then
    assert banded.band == fidelity_band(e.arch, "fa_fwd", path)
    assert (banded.band.low, banded.band.high, banded.band.kernels, banded.band.gpu) == (1.2, 1.5, 2, "GPU X")
    last = banded.lines()[-1]
    lo, hi = e.seconds * 1.2 * 1e3, e.seconds * 1.5 * 1e3
    assert f"expect {lo:.4g}-{hi:.4g} ms" in last
    assert f"{e.tflops / 1.5:.0f}-{e.tflops / 1.2:.0f} TFLOP/s" in last and "1.20x-1.50x" in last
    # a program with no measured kernel keeps no band, and says so
    assert with_band(e, "fa_bwd", path).band is None
    assert "no error band" in with_band(e, "fa_bwd", path).lines()[-1]


def test_builtin_band_of_the_h200_comes_from_its_fidelity_results():
    """archs/fidelity.json's h200 band is the ratio of the cuDNN kernels' measured time to the estimate."""
    # given
    band = fidelity_band("h200", "fa_fwd")
    # then
    assert band is not None and band.gpu == "NVIDIA H200" and band.kernels == 2
    assert 1.0 < band.low <= band.high < 2.0


def test_cli_estimates_a_gemm_schedule_with_its_band(tmp_path):
    """`twill estimate` takes a gemm schedule (--m/--n/--k) and prints the band of the h200's GEMM kernels."""
    # given
    sched = tmp_path / "gemm.json"
    solved = subprocess.run([sys.executable, "-m", "twill", "solve", "gemm", "--arch", "h200", "--out", str(sched),
                             "--quiet"], capture_output=True, text=True)
    assert solved.returncode == 0, solved.stderr
    # when
    run = subprocess.run([sys.executable, "-m", "twill", "estimate", str(sched), "--m", "4096", "--n", "4096",
                          "--k", "4096"], capture_output=True, text=True)
    # then
    assert run.returncode == 0, run.stderr
    band = fidelity_band("h200", "gemm")
    assert "GEMM 4096x4096x4096 on h200" in run.stdout
    assert f"took {band.low:.2f}x-{band.high:.2f}x the prediction" in run.stdout
