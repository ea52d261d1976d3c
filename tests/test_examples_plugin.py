"""The example plugin package in examples/ installs with pip and adds its arch to twill.

This is the path docs/arch-format.md and notebooks/03 describe: a separate distribution whose
pyproject declares a ``twill.archs`` entry point. The package is built and installed offline
(``--no-build-isolation`` uses the hatchling of twill's test extra) into a temporary folder, and
twill runs in a subprocess that sees that folder on its path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "twill-arch-h100-fastexp"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding the installed plugin (module and dist-info with its entry point)."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(PLUGIN)],
        capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"pip install of {PLUGIN.name} failed:\n{done.stdout}\n{done.stderr}"
    return target


def run_twill(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "twill", *args], capture_output=True, text=True, env=env, timeout=120)


def test_installed_plugin_is_listed_by_twill_archs(site):
    """After pip installs the example package, ``twill archs`` lists its arch beside the built-ins."""
    # given: the plugin installed into `site` (fixture)
    # when
    out = run_twill(site, "archs")
    # then
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "h100-fastexp" in rows and "twill-arch-h100-fastexp" in rows["h100-fastexp"]
    assert rows["h100-fastexp"].split()[3] == "32" and "h100" in rows  # the MUFU/clk/SM column


def test_installed_plugin_arch_schedules_programs(site):
    """Programs cost their ops from the plugin's numbers: its 32 exp2 per clock price FA forward's
    16512 exponentials (two 64x128 tiles plus 2 x 64 rescale factors) at 516 MUFU cycles."""
    # given
    args = ("show", "fa_fwd", "--arch", "h100-fastexp", "-p", "head_dim=64", "-p", "subtiles=2")
    # when
    out = run_twill(site, *args)
    # then
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("fa_fwd on h100-fastexp:")
    assert any(line.split()[:2] == ["mufu", "516"] for line in out.stdout.splitlines())


def test_plugin_arch_file_loads_with_a_source_for_every_number():
    """The shipped TOML passes twill's own loader (which refuses an unsourced number), names the arch
    the entry point promises, and doubles the H100's 16 exp2 per clock."""
    # given
    from twill.arch.toml import load_arch_toml

    # when
    fast = load_arch_toml(PLUGIN / "src" / "twill_arch_h100_fastexp" / "h100-fastexp.toml", origin="file")
    # then
    assert fast.name == "h100-fastexp" and fast.rate("mufu_ops_per_clk") == 32
    assert all(fact.source.strip() for fact in fast.all_facts().values())
