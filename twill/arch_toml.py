"""Load an ``Arch`` from a TOML file, refusing any number without a source.

Format (docs/arch-format.md): top-level ``name`` and ``description``; tables ``[chip]``,
``[limits]``, ``[rates]``, ``[latencies]``, ``[sync]``, ``[features]`` whose entries are
``key = { value = ..., source = "..." }``; and one ``[units.NAME]`` table per functional unit with
``capacity = { value, source }``, optional ``async``, ``aliases`` and ``description``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .arch import Arch, Fact, Unit
from .errors import ArchError

__all__ = ["load_arch_toml", "arch_from_dict", "REQUIRED"]

# What the cost model and the solver read; a file missing one is rejected up front.
REQUIRED: dict[str, tuple[str, ...]] = {
    "chip": ("sms", "clock_mhz"),
    "limits": (
        "warps_per_cta",
        "warp_group_sizes",
        "regs_per_sm",
        "regs_per_thread_max",
        "reg_alloc_min",
        "reg_alloc_max",
        "reg_alloc_step",
        "regs_reserved_per_thread",
        "smem_bytes_per_cta",
        "tmem_cols",
    ),
    "rates": (
        "tensor_flops_per_clk_fp16",
        "tensor_flops_per_clk_bf16",
        "tensor_flops_per_clk_fp8",
        "mma_full_rate_min_m",
        "mufu_ops_per_clk",
        "fp32_ops_per_clk",
        "alu_ops_per_clk",
        "convert_ops_per_clk",
        "tma_bytes_per_clk",
    ),
    "latencies": ("mma", "mufu", "fp32", "tma"),
    "sync": ("mbarrier", "named_barrier", "handoff_fixed", "handoff_per_kib", "wait_issue"),
    "features": ("accumulator", "mma_issuer"),
}
SECTIONS = tuple(REQUIRED)


def _fact(where: str, raw: Any) -> Fact:
    if not isinstance(raw, dict) or set(raw) - {"value", "source", "note"} or "value" not in raw:
        raise ArchError(f"{where}: expected {{ value = ..., source = \"...\" }}, got {raw!r}")
    if "source" not in raw or not str(raw["source"]).strip():
        raise ArchError(f"{where}: the value {raw['value']!r} has no source; every arch number needs one")
    value = raw["value"]
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, (int, float, str, bool)):
        raise ArchError(f"{where}: value must be a number or a string, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise ArchError(f"{where}: value {value} is negative")
    return Fact(value, str(raw["source"]))


def _unit(name: str, raw: Any, where: str) -> Unit:
    if not isinstance(raw, dict):
        raise ArchError(f"{where}: [units.{name}] must be a table")
    unknown = set(raw) - {"capacity", "async", "aliases", "description"}
    if unknown:
        raise ArchError(f"{where}: [units.{name}] has unknown keys {sorted(unknown)}")
    if "capacity" not in raw:
        raise ArchError(f"{where}: [units.{name}] has no capacity")
    cap = _fact(f"{where}: units.{name}.capacity", raw["capacity"])
    if isinstance(cap.value, bool) or not isinstance(cap.value, int) or cap.value < 1:
        raise ArchError(f"{where}: units.{name}.capacity must be a positive integer, got {cap.value!r}")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ArchError(f"{where}: units.{name}.aliases must be a list of strings")
    return Unit(
        name=name,
        capacity=cap,
        description=str(raw.get("description", "")),
        is_async=bool(raw.get("async", False)),
        aliases=tuple(aliases),
    )


def arch_from_dict(data: dict[str, Any], where: str, path: Path | None = None, origin: str = "builtin") -> Arch:
    """Build an ``Arch`` from parsed TOML, checking every required fact is present and sourced."""
    if not isinstance(data.get("name"), str) or not data["name"]:
        raise ArchError(f"{where}: top-level 'name' (a string) is missing")
    unknown = set(data) - {"name", "description", "units", *SECTIONS}
    if unknown:
        raise ArchError(f"{where}: unknown top-level keys {sorted(unknown)}")
    tables: dict[str, dict[str, Fact]] = {}
    for section in SECTIONS:
        raw = data.get(section, {})
        if not isinstance(raw, dict):
            raise ArchError(f"{where}: [{section}] must be a table")
        tables[section] = {k: _fact(f"{where}: {section}.{k}", v) for k, v in raw.items()}
        missing = [k for k in REQUIRED[section] if k not in tables[section]]
        if missing:
            raise ArchError(f"{where}: [{section}] is missing {', '.join(missing)}")
    units_raw = data.get("units")
    if not isinstance(units_raw, dict) or not units_raw:
        raise ArchError(f"{where}: no [units.NAME] tables; an arch needs at least one functional unit")
    units = tuple(_unit(n, u, where) for n, u in units_raw.items())
    return Arch(
        name=data["name"],
        description=str(data.get("description", "")),
        units=units,
        path=path,
        origin=origin,
        **tables,
    )


def load_arch_toml(path: str | Path, origin: str = "builtin") -> Arch:
    """Read and check one arch file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ArchError(f"{p}: cannot read arch file ({err.strerror})") from err
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ArchError(f"{p}: not valid TOML ({err})") from err
    return arch_from_dict(data, str(p), path=p, origin=origin)
