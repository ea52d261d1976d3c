"""Archs come from archs/ and from the ``twill.archs`` entry point, so a separate package can add one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ARCHS = Path(__file__).resolve().parents[1] / "archs"


def install_throwaway_plugin(site: Path, name: str = "h100x2mufu") -> None:
    """Lay out an installed distribution (module + dist-info with an entry point) in ``site``."""
    pkg = site / "twill_throwaway_arch"
    pkg.mkdir(parents=True)
    toml = (ARCHS / "h100.toml").read_text().replace('name = "h100"', f'name = "{name}"', 1)
    toml = toml.replace("mufu_ops_per_clk = { value = 16,", "mufu_ops_per_clk = { value = 32,", 1)
    (pkg / "arch.toml").write_text(toml)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n\ndef archs():\n    return Path(__file__).with_name('arch.toml')\n")
    info = site / "twill_throwaway_arch-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: twill-throwaway-arch\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[twill.archs]\n{name} = twill_throwaway_arch:archs\n")


def run_twill(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "twill", *args], capture_output=True, text=True, env=env, timeout=120)


def test_plugin_arch_shows_up_in_twill_archs(tmp_path):
    """An arch added by another package through the entry point is listed beside the built-ins."""
    install_throwaway_plugin(tmp_path)
    out = run_twill(tmp_path, "archs")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("h100x2mufu"))
    assert " 32 " in line and "twill-throwaway-arch" in line
    assert any(x.startswith("h100 ") for x in out.stdout.splitlines())


def test_plugin_arch_is_usable(tmp_path):
    """The plugin's arch schedules programs like a built-in one (a twice-as-fast MUFU halves exp time)."""
    install_throwaway_plugin(tmp_path)
    out = run_twill(tmp_path, "show", "fa_fwd", "--arch", "h100x2mufu")
    assert out.returncode == 0, out.stderr
    assert "mufu  516" in out.stdout


def test_duplicate_plugin_name_is_refused(tmp_path):
    """Two sources defining one arch name is an error naming both."""
    install_throwaway_plugin(tmp_path, name="h100")
    out = run_twill(tmp_path, "archs")
    assert out.returncode == 2 and "duplicate definition of arch 'h100'" in out.stderr
