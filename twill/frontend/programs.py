"""Find and build loop-body programs: built-in names, ``.py`` files, or imported graph files.

A program is a Python module with ``DESCRIPTION`` (one line), ``PARAMETERS`` (name -> default)
and ``build(arch, **params) -> LoopBody``; it asks the arch for every cost, so one program runs
on every arch. Built-ins live in the repository's ``programs/`` folder (packed into the wheel as
``twill/_data/programs``). A ``.json`` path is read as a graph file (``twill.body/1`` from
``twill import``, or curated-ddg). From Triton (docs/frontend.md): a ``.ttgir``/``.mlir`` path is
imported as TTGIR, and ``kernel.py:name`` with a launch description is compiled first.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from twill.arch.model import Arch
from twill.body_json import body_from_document, is_body_document
from twill.errors import GraphError, ProgramError, TwillError
from twill.frontend.ddg_import import ddg_from_dict
from twill.frontend.triton_compile import capability_for, compile_to_dump, read_launch
from twill.frontend.ttgir import import_ttgir, read_ttgir
from twill.ir import LoopBody
from twill.jsonfile import read_json

__all__ = ["ProgramInfo", "programs_dir", "list_programs", "program_info", "load_program", "parse_params",
           "iteration_flops"]


@dataclass(frozen=True, slots=True)
class ProgramInfo:
    name: str
    description: str
    parameters: dict[str, Any]
    path: Path


def programs_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[1] / "programs", here.parent / "_data" / "programs"):
        if candidate.is_dir():
            return candidate
    raise ProgramError("the built-in programs/ folder is missing from this installation")


def _load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"twill_program_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ProgramError(f"{path}: cannot load as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except TwillError:
        raise
    except (Exception, SystemExit) as err:  # a program's sys.exit() must not end twill
        raise ProgramError(f"{path}: failed to import ({_what(err)})") from err
    if not callable(getattr(module, "build", None)):
        raise ProgramError(f"{path}: defines no build(arch, **params) function")
    _parameters(path, module)
    return module


def _what(err: BaseException) -> str:
    """An exception as one short line for an error message."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def _parameters(path: Path, module: ModuleType) -> dict[str, Any]:
    """A program's PARAMETERS: names to defaults whose type ``-p NAME=VALUE`` can parse into."""
    raw = getattr(module, "PARAMETERS", {})
    if not isinstance(raw, dict):
        raise ProgramError(f"{path}: PARAMETERS must be a dict of name -> default, got {type(raw).__name__}")
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, float, str)):
            raise ProgramError(f"{path}: parameter {key!r} = {value!r}; names are strings and defaults are "
                               "bool, int, float or str (the types -p NAME=VALUE can give)")
    return dict(raw)


def _info(path: Path) -> ProgramInfo:
    module = _load_module(path)
    return ProgramInfo(path.stem, str(getattr(module, "DESCRIPTION", "")).strip(), _parameters(path, module), path)


def list_programs() -> list[ProgramInfo]:
    return [_info(p) for p in sorted(programs_dir().glob("*.py")) if not p.name.startswith("_")]


def parse_params(pairs: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """Turn ``["subtiles=2", "dtype=bf16"]`` into typed values, typed like the defaults."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise ProgramError(f"parameter {pair!r}: expected NAME=VALUE")
        if key not in defaults:
            raise ProgramError(f"parameter {key!r}: unknown; this program takes {', '.join(sorted(defaults)) or 'none'}")
        kind = type(defaults[key])
        try:
            out[key] = (raw.lower() in ("1", "true", "yes")) if kind is bool else kind(raw)
        except ValueError:
            raise ProgramError(f"parameter {key!r}: {raw!r} is not a valid {kind.__name__}") from None
    return out


def _resolve(spec: str) -> Path:
    path = Path(spec)
    if path.suffix == ".py" and path.is_file():
        return path
    if path.suffix or "/" in spec:
        raise ProgramError(f"program {spec!r}: no such file")
    builtin = programs_dir() / f"{spec}.py"
    if not builtin.is_file():
        names = ", ".join(p.name for p in list_programs())
        raise ProgramError(f"unknown program {spec!r}; built-in programs: {names} (or a .py or .json file)")
    return builtin


def program_info(spec: str) -> ProgramInfo:
    """Name, description and parameter defaults of a built-in name or ``.py`` program."""
    return _info(_resolve(spec))


TTGIR_SUFFIXES = (".ttgir", ".mlir")


def triton_kernel(spec: str) -> tuple[Path, str] | None:
    """``("kernels.py", "attn_fwd")`` for a ``file.py:kernel`` spec, else None."""
    path, sep, kernel = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not kernel.isidentifier():
        return None
    return Path(path), kernel


def _load_graph(spec: str, arch: Arch, loop: int) -> LoopBody:
    """A ``.json`` graph: twill's own ``twill.body/1`` (from ``twill import``) or curated-ddg."""
    data = read_json(Path(spec), "graph", GraphError)
    if is_body_document(data):
        return body_from_document(data, where=spec)
    return ddg_from_dict(data, arch, name=Path(spec).name.split(".")[0] or "ddg", loop=loop)


def _load_triton(spec: str, arch: Arch, launch: str | None, loop: int) -> LoopBody:
    """Import a TTGIR file, or compile ``file.py:kernel`` with its launch description and import it."""
    if spec.endswith(TTGIR_SUFFIXES):
        values: dict[str, int] = {}
        trips = None
        if launch:
            desc = read_launch(launch)
            values, trips = dict(desc.values), desc.trip_count
        return read_ttgir(spec, arch, loop=loop, values=values, trip_count=trips).body
    found = triton_kernel(spec)
    assert found is not None
    path, kernel = found
    if not path.is_file():
        raise ProgramError(f"{spec}: no such kernel file {str(path)!r}")
    if not launch:
        raise ProgramError(f"{spec}: a Triton kernel needs --launch LAUNCH.toml (signature, constexprs, warps, "
                           "stages; examples/triton/*.toml)")
    desc = read_launch(launch)
    if desc.kernel and desc.kernel != kernel:
        raise ProgramError(f"{launch}: describes kernel {desc.kernel!r}, not {kernel!r}")
    dump, version = compile_to_dump(path, kernel, desc, capability_for(arch))
    imported = import_ttgir(dump, arch, name=kernel, loop=loop, values=dict(desc.values), trip_count=desc.trip_count)
    return replace(imported.body, params={**imported.body.params, "triton_version": version})


def load_program(spec: str, arch: Arch, params: dict[str, Any] | None = None, loop: int = 0,
                 launch: str | None = None) -> LoopBody:
    """Build the loop body named by ``spec`` for ``arch``.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> body = load_program("toy", get_arch("h100"))
    >>> [op.name for op in body.ops]
    ['S', 'P', 'O']
    """
    params = dict(params or {})
    if spec.endswith((".json", *TTGIR_SUFFIXES)) or triton_kernel(spec):
        if params:
            raise ProgramError(f"program {spec!r}: a graph file or Triton kernel takes no parameters")
        if spec.endswith(".json"):
            if not Path(spec).is_file():
                raise GraphError(f"{spec}: no such graph file")
            return _load_graph(spec, arch, loop)
        return _load_triton(spec, arch, launch, loop)
    if launch:
        raise ProgramError(f"program {spec!r}: --launch applies to a Triton kernel (file.py:kernel) or a .ttgir file")
    path = _resolve(spec)
    module = _load_module(path)
    defaults = _parameters(path, module)
    unknown = set(params) - set(defaults)
    if unknown:
        raise ProgramError(f"program {path.stem!r}: unknown parameters {sorted(unknown)}; it takes {sorted(defaults)}")
    merged = {**defaults, **params}
    try:
        body = module.build(arch, **merged)
    except TwillError:
        raise
    except (Exception, SystemExit) as err:
        raise ProgramError(f"program {path.stem!r}: build failed ({_what(err)})") from err
    if not isinstance(body, LoopBody):
        raise ProgramError(f"program {path.stem!r}: build() returned {type(body).__name__}, not a LoopBody")
    return body


def iteration_flops(spec: str, params: dict[str, Any] | None = None) -> float | None:
    """Useful FLOPs of one loop iteration, from the program's optional ``flops(**params)``.

    The II alone cannot compare tile shapes (a bigger tile takes more cycles and does more work),
    so a program may say how much work one iteration does; ``None`` when it does not (graph files,
    programs without the hook), and the caller picks a fallback.
    """
    if spec.endswith(".json"):
        return None
    path = _resolve(spec)
    module = _load_module(path)
    hook = getattr(module, "flops", None)
    if not callable(hook):
        return None
    merged = {**_parameters(path, module), **dict(params or {})}
    try:
        value = hook(**merged)
    except TwillError:
        raise
    except (Exception, SystemExit) as err:
        raise ProgramError(f"program {path.stem!r}: flops() failed ({_what(err)})") from err
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ProgramError(f"program {path.stem!r}: flops() returned {value!r}; expected a positive number")
    return float(value)


def describe_parameters(info: ProgramInfo) -> str:
    return ", ".join(f"{k}={v}" for k, v in info.parameters.items())

