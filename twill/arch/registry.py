"""Where architectures come from: the built-in ``archs/`` files and the ``twill.archs`` entry points.

Discovery is explicit (``available_archs()``), happens when called, never at import, and is
sorted. Each entry point's value is a zero-argument callable returning an ``Arch``, a TOML path,
or a list of either. The built-in archs are registered through the same group (see
pyproject.toml); when twill runs from a source tree without being installed, the ``archs/``
folder is read directly. Two sources defining the same name is a ``PluginError``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from twill.arch.model import Arch
from twill.arch.toml import load_arch_toml
from twill.errors import ArchError, PluginError

__all__ = ["available_archs", "get_arch", "builtin_archs", "archs_dir", "GROUP"]

GROUP = "twill.archs"


def archs_dir() -> Path:
    """The built-in arch files: ``archs/`` beside the package in a source tree, or the copy
    packed into the wheel under ``twill/_data/archs``."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[1] / "archs", here.parent / "_data" / "archs"):
        if candidate.is_dir():
            return candidate
    raise ArchError("the built-in archs/ folder is missing from this installation")


def builtin_archs() -> list[Path]:
    """Entry-point target for the built-in archs: every TOML file in ``archs/``."""
    return sorted(archs_dir().glob("*.toml"))


def _as_archs(value: Any, origin: str) -> list[Arch]:
    if isinstance(value, Arch):
        return [value]
    if isinstance(value, (str, Path)):
        return [load_arch_toml(value, origin=origin)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _as_archs(v, origin)]
    raise PluginError(f"entry point {origin!r}: returned {type(value).__name__}; expected an Arch or a TOML path")


def _add(found: dict[str, Arch], arch: Arch) -> None:
    if arch.name in found:
        other = found[arch.name]
        raise PluginError(
            f"duplicate definition of arch {arch.name!r} in {sorted([other.origin, arch.origin])}; "
            "uninstall one of them or rename the arch"
        )
    found[arch.name] = arch


@lru_cache(maxsize=1)
def _discover() -> tuple[Arch, ...]:
    found: dict[str, Arch] = {}
    saw_builtin = False
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.dist.name if e.dist else "", e.name)):
        dist = ep.dist.name if ep.dist else "?"
        origin = "builtin" if dist == "twill" else f"{dist}:{ep.name}"
        try:
            target = ep.load()
            value = target()
        except ArchError:
            raise
        except Exception as err:  # a third-party plugin can fail in any way; name it and move on
            raise PluginError(f"entry point {ep.name!r} of {dist!r} failed to load: {err}") from err
        saw_builtin |= origin == "builtin"
        for arch in _as_archs(value, origin):
            _add(found, arch)
    if not saw_builtin:
        for path in builtin_archs():
            _add(found, load_arch_toml(path, origin="builtin"))
    return tuple(sorted(found.values(), key=lambda a: a.name))


def available_archs(refresh: bool = False) -> tuple[Arch, ...]:
    """Every arch twill can see, sorted by name."""
    if refresh:
        _discover.cache_clear()
    return _discover()


def get_arch(name_or_path: str) -> Arch:
    """An arch by name, or from a TOML file when given a path."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return load_arch_toml(name_or_path, origin="file")
    for arch in available_archs():
        if arch.name == name_or_path:
            return arch
    names = ", ".join(a.name for a in available_archs())
    raise ArchError(f"unknown arch {name_or_path!r}; available: {names} (or pass a .toml file)")
