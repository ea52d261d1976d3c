"""What a sweep varies: a program's parameters, whichever frontend the program comes from.

A built-in or ``.py`` program takes ``PARAMETERS`` (``-p``). A Triton kernel (``file.py:kernel``
with ``--launch L.toml``) takes no ``-p`` when solved alone: its knobs live in the launch
description. A sweep varies them as parameters: every ``[constexprs]`` entry (``BLOCK_N``...) plus
``num_warps`` and ``num_stages``, each point compiled from a copy of the launch file with its values.
Graph and TTGIR files are already fixed graphs: they take no parameters.
"""

from __future__ import annotations

import json
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twill.arch.model import Arch
from twill.errors import ProgramError
from twill.frontend.programs import TTGIR_SUFFIXES, iteration_flops, load_program, program_info, triton_kernel
from twill.frontend.triton_compile import read_launch
from twill.ir import LoopBody

__all__ = ["ProgramSource"]

_LAUNCH_KNOBS = ("num_warps", "num_stages")


@dataclass(frozen=True, slots=True)
class ProgramSource:
    """A program spec as the CLI takes it, with the Triton launch file when there is one."""

    spec: str
    launch: str | None = None

    @property
    def is_triton_kernel(self) -> bool:
        return triton_kernel(self.spec) is not None

    @property
    def is_fixed_graph(self) -> bool:
        return self.spec.endswith((".json", *TTGIR_SUFFIXES))

    def parameters(self) -> dict[str, Any]:
        """Every sweepable parameter with its default value."""
        if self.is_fixed_graph:
            return {}
        if self.is_triton_kernel:
            if not self.launch:
                raise ProgramError(f"{self.spec}: a Triton kernel needs --launch LAUNCH.toml")
            launch = read_launch(self.launch)
            return {**dict(launch.constexprs), "num_warps": launch.num_warps, "num_stages": launch.num_stages}
        return program_info(self.spec).parameters

    def build(self, arch: Arch, params: dict[str, Any]) -> LoopBody:
        """The loop body at one point (a Triton kernel is compiled with the point's launch values)."""
        if self.is_fixed_graph:
            return load_program(self.spec, arch, params, launch=self.launch)
        if not self.is_triton_kernel:
            return load_program(self.spec, arch, params)
        assert self.launch is not None
        with tempfile.TemporaryDirectory(prefix="twill-sweep-launch-") as folder:
            path = Path(folder) / Path(self.launch).name
            path.write_text(_launch_with(Path(self.launch), params), encoding="utf-8")
            return load_program(self.spec, arch, {}, launch=str(path))

    def flops(self, params: dict[str, Any]) -> float | None:
        """The program's ``flops()``, or None (Triton kernels and graphs have none)."""
        if self.is_fixed_graph or self.is_triton_kernel:
            return None
        return iteration_flops(self.spec, params)


def _launch_with(path: Path, params: dict[str, Any]) -> str:
    """The launch file's TOML with ``params`` in place of its constexprs and launch knobs.

    Written back as flat ``"key" = value`` tables: a launch description has no nesting deeper than
    one table, and JSON's string and number syntax is valid TOML.
    """
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    raw.setdefault("constexprs", {})
    for name, value in params.items():
        if name in _LAUNCH_KNOBS:
            raw[name] = value
        else:
            raw["constexprs"][name] = value
    lines = [f"{json.dumps(k)} = {_value(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for table, entries in raw.items():
        if isinstance(entries, dict):
            lines.append(f"\n[{table}]")
            lines.extend(f"{json.dumps(k)} = {_value(v)}" for k, v in entries.items())
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)
