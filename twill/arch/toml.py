"""Load an ``Arch`` from a TOML file, refusing any number without a source.

Format (docs/arch-format.md): top-level ``name`` and ``description``; tables ``[chip]``,
``[limits]``, ``[rates]``, ``[latencies]``, ``[sync]``, ``[features]`` whose entries are
``key = { value = ..., source = "..." }``; and one ``[units.NAME]`` table per functional unit with
``capacity = { value, source }``, optional ``async``, ``aliases`` and ``description``.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from twill.arch.model import Arch, Fact, Unit
from twill.errors import ArchError
from twill.ir import MAX_CYCLES

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

# What the numbers the code reads must be: (type, smallest, largest). Bounds keep every derived
# cycle count finite and within the solver's integer range; they are far outside any real GPU.
_INT, _NUMBER = "integer", "number"
LIMITS: dict[str, tuple[str, float, float]] = {
    "warps_per_cta": (_INT, 1, 1 << 10),
    "regs_per_sm": (_INT, 1, 1 << 24),
    "regs_per_thread_max": (_INT, 1, 1 << 16),
    "reg_alloc_min": (_INT, 1, 1 << 16),
    "reg_alloc_max": (_INT, 1, 1 << 16),
    "reg_alloc_step": (_INT, 1, 1 << 16),
    "regs_reserved_per_thread": (_INT, 0, 1 << 16),
    "smem_bytes_per_cta": (_INT, 0, 1 << 32),
    "tmem_cols": (_INT, 0, 1 << 20),
    "reg_alloc_group_warps": (_INT, 1, 1 << 10),  # optional
}
CHIP: dict[str, tuple[str, float, float]] = {"sms": (_INT, 1, 1 << 16), "clock_mhz": (_NUMBER, 1e-3, 1e6)}
SECTION_RANGES: dict[str, tuple[str, float, float]] = {
    "rates": (_NUMBER, 1e-6, 1e12),  # per-SM rates: work / rate must stay a finite cycle count
    "latencies": (_NUMBER, 0, MAX_CYCLES),
    "sync": (_NUMBER, 0, MAX_CYCLES),
}
FEATURES = {"accumulator": ("registers", "tmem"), "mma_issuer": ("warpgroup", "thread"),
            # optional: how a TMEM load completes, and whether one issuer's MMAs run in issue order
            "tmem_load_wait": ("blocking", "async"), "mma_pipe_order": ("per_issuer", "none")}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fact(where: str, raw: Any) -> Fact:
    if not isinstance(raw, dict) or set(raw) - {"value", "source", "note", "datasheet"} or "value" not in raw:
        raise ArchError(f"{where}: expected {{ value = ..., source = \"...\" }}, got {_short(raw)}")
    if "datasheet" in raw:  # a calibrated fact keeps the value it replaced, sourced like any other
        if not isinstance(raw["datasheet"], dict) or "datasheet" in raw["datasheet"]:
            raise ArchError(f"{where}.datasheet: expected {{ value = ..., source = \"...\" }}, "
                            f"got {_short(raw['datasheet'])}")
        old = _fact(f"{where}.datasheet", raw["datasheet"])
        fact = _fact(where, {k: v for k, v in raw.items() if k != "datasheet"})
        return Fact(fact.value, f"{fact.source} [datasheet: {old.value}; {old.source}]")
    if not isinstance(raw.get("source"), str) or not raw["source"].strip():
        raise ArchError(f"{where}: the value {_short(raw['value'])} has no source; every arch number needs one "
                        "(source = \"...\")")
    value = raw["value"]
    if isinstance(value, list):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            raise ArchError(f"{where}: a list value must hold positive integers, got {_short(value)}")
        value = ",".join(str(v) for v in value)
    if not isinstance(value, (int, float, str, bool)):
        raise ArchError(f"{where}: value must be a number or a string, got {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ArchError(f"{where}: value {value} is not a finite number")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise ArchError(f"{where}: value {value} is negative")
    return Fact(value, raw["source"])


def _check_range(where: str, fact: Fact, kind: str, lo: float, hi: float) -> None:
    value = fact.value
    ok = isinstance(value, int) if kind == _INT else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise ArchError(f"{where}: value must be {'an integer' if kind == _INT else 'a number'}, got {_short(value)}")
    if not lo <= value <= hi:
        raise ArchError(f"{where}: value {value} is outside [{lo:g}, {hi:g}]")


def _check_facts(where: str, tables: dict[str, dict[str, Fact]]) -> None:
    """Every fact the cost model and the solver read has the right type and a sane magnitude, and
    the register limits leave at least one legal setmaxnreg budget above the reserved registers."""
    for section, (kind, lo, hi) in SECTION_RANGES.items():
        for key, fact in tables[section].items():
            _check_range(f"{where}: {section}.{key}", fact, kind, lo, hi)
    for section, ranges in (("limits", LIMITS), ("chip", CHIP)):  # other chip facts may be words
        for key, (kind, lo, hi) in ranges.items():
            if key in tables[section]:  # the required ones were checked present already
                _check_range(f"{where}: {section}.{key}", tables[section][key], kind, lo, hi)
    sizes = str(tables["limits"]["warp_group_sizes"].value).split(",")
    if not all(x.isdigit() and 1 <= int(x) <= 1 << 10 for x in sizes):
        raise ArchError(f"{where}: limits.warp_group_sizes must be a list of warp counts in [1, 1024], "
                        f"got {_short(tables['limits']['warp_group_sizes'].value)}")
    _check_range(f"{where}: rates.mma_full_rate_min_m", tables["rates"]["mma_full_rate_min_m"], _INT, 1, 1 << 16)
    limit = {k: int(tables["limits"][k].value) for k in LIMITS if k in tables["limits"]}
    top = min(limit["reg_alloc_max"], limit["regs_per_thread_max"])
    budgets = range(limit["reg_alloc_min"], top + 1, limit["reg_alloc_step"])
    if not budgets or budgets[-1] <= limit["regs_reserved_per_thread"]:
        raise ArchError(f"{where}: [limits] leave no register budget: setmaxnreg values {limit['reg_alloc_min']}.."
                        f"{top} in steps of {limit['reg_alloc_step']} must include one above the "
                        f"{limit['regs_reserved_per_thread']} reserved registers")
    for key, allowed in FEATURES.items():
        if key in tables["features"] and tables["features"][key].value not in allowed:
            raise ArchError(f"{where}: features.{key} must be one of {', '.join(map(repr, allowed))}, "
                            f"got {_short(tables['features'][key].value)}")


def _unit(name: str, raw: Any, where: str) -> Unit:
    if not name or any(c.isspace() for c in name):
        raise ArchError(f"{where}: unit name {name!r} must be non-empty and without spaces (ops name their unit)")
    if not isinstance(raw, dict):
        raise ArchError(f"{where}: [units.{name}] must be a table")
    unknown = set(raw) - {"capacity", "async", "aliases", "description"}
    if unknown:
        raise ArchError(f"{where}: [units.{name}] has unknown keys {sorted(unknown)}")
    if "capacity" not in raw:
        raise ArchError(f"{where}: [units.{name}] has no capacity")
    cap = _fact(f"{where}: units.{name}.capacity", raw["capacity"])
    if isinstance(cap.value, bool) or not isinstance(cap.value, int) or not 1 <= cap.value <= 1 << 16:
        raise ArchError(f"{where}: units.{name}.capacity must be a positive integer up to 65536, "
                        f"got {_short(cap.value)}")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise ArchError(f"{where}: units.{name}.aliases must be a list of non-empty strings")
    if not isinstance(raw.get("async", False), bool):
        raise ArchError(f"{where}: units.{name}.async must be true or false, got {_short(raw['async'])}")
    if not isinstance(raw.get("description", ""), str):
        raise ArchError(f"{where}: units.{name}.description must be a string")
    return Unit(
        name=name,
        capacity=cap,
        description=raw.get("description", ""),
        is_async=raw.get("async", False),
        aliases=tuple(aliases),
    )


def _check_pipeline_names(where: str, units: tuple[Unit, ...]) -> None:
    """An imported graph's pipeline name must pick one unit: no alias may name two units."""
    owner: dict[str, str] = {}
    for u in units:
        for key in {u.name.lower(), *u.aliases}:
            if key in owner and owner[key] != u.name:
                raise ArchError(f"{where}: pipeline name {key!r} names both unit {owner[key]!r} and unit "
                                f"{u.name!r}; aliases must be unique")
            owner[key] = u.name


def arch_from_dict(data: dict[str, Any], where: str, path: Path | None = None, origin: str = "builtin") -> Arch:
    """Build an ``Arch`` from parsed TOML, checking every required fact is present and sourced."""
    if not isinstance(data.get("name"), str) or not data["name"].strip():
        raise ArchError(f"{where}: top-level 'name' (a string) is missing")
    if not isinstance(data.get("description", ""), str):
        raise ArchError(f"{where}: top-level 'description' must be a string")
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
    _check_pipeline_names(where, units)
    _check_facts(where, tables)
    return Arch(
        name=data["name"],
        description=data.get("description", ""),
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
        raise ArchError(f"{p}: cannot read arch file ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise ArchError(f"{p}: not a UTF-8 text file (byte {err.start}: {err.reason})") from err
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ArchError(f"{p}: not valid TOML ({err})") from err
    except RecursionError as err:
        raise ArchError(f"{p}: not valid TOML (nested too deeply to read)") from err
    except ValueError as err:  # Python refuses integer literals of more than 4300 digits
        raise ArchError(f"{p}: not valid TOML ({str(err).split(':')[0]})") from err
    return arch_from_dict(data, str(p), path=p, origin=origin)
