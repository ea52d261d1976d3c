"""Build a generated kernel for sm_90a without a GPU and read the facts tests check.

Triton compiles Gluon to TTGIR, PTX and a cubin on any machine (``GluonASTSource`` with a CUDA
target); only ``n_regs``/``n_spills`` need a GPU, so ptxas (bundled with Triton) is run again with
``-v`` on the PTX to read registers and spills. Requires the ``triton`` package (the ``codegen``
extra).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from twill.codegen.frames import Frame
from twill.codegen.plan import CodegenError

__all__ = ["Compiled", "load_module", "compile_generated"]


@dataclass(frozen=True, slots=True)
class Compiled:
    ttgir: str
    ptx: str
    cubin: bytes
    ptxas_log: str
    registers: int
    spill_stores: int
    spill_loads: int
    num_warps: int  # TTGIR module ttg.num-warps (the default partition)
    partition_warps: tuple[int, ...]  # TTGIR num_warps(N) of each worker partition region
    requested_regs: tuple[int, ...]  # TTGIR requestedRegisters (workers)
    setmaxnreg: tuple[int, ...]  # PTX setmaxnreg immediates, in order


def load_module(source: str, name: str = "twill_generated") -> ModuleType:
    """Import generated source from a real file (``@gluon.jit`` reads its function's source)."""
    tmp = Path(tempfile.mkdtemp(prefix="twill-codegen-")) / f"{name}.py"
    tmp.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, tmp)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _ints(pattern: str, text: str) -> tuple[int, ...]:
    m = re.search(pattern, text)
    return tuple(int(x) for x in m.group(1).split(",")) if m else ()


def compile_generated(source: str, frame: Frame, name: str = "twill_generated") -> Compiled:
    """Compile ``source`` for sm_90a; ``CodegenError`` if Triton or ptxas rejects it."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.experimental.gluon._runtime import GluonASTSource
    except ImportError as err:
        raise CodegenError(f"codegen: compiling needs triton 3.6 (pip install 'twill[codegen]'): {err}") from None
    mod = load_module(source, name)
    kernel = getattr(mod, mod.KERNEL_NAME)
    try:
        k = triton.compile(GluonASTSource(kernel, frame.signature(), {}), target=GPUTarget("cuda", 90, 32),
                           options=dict(mod.LAUNCH))
    except Exception as err:  # noqa: BLE001 - Triton raises many kinds; report the first line
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "fatal" in ln), None) or (lines[0] if lines else repr(err))
        raise CodegenError(f"codegen: Triton rejects the kernel: {why}") from None
    ptx = k.asm["ptx"]
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx, encoding="utf-8")
        log = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", str(src), "-o", str(Path(d) / "k.o")],
                             capture_output=True, text=True, check=False)
    text = log.stdout + log.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    ttgir = k.asm["ttgir"]
    return Compiled(
        ttgir=ttgir, ptx=ptx, cubin=k.asm["cubin"], ptxas_log=text,
        registers=int(regs.group(1)) if regs else -1,
        spill_stores=int(spills.group(1)) if spills else -1, spill_loads=int(spills.group(2)) if spills else -1,
        num_warps=int(re.search(r'"ttg.num-warps" = (\d+)', ttgir).group(1)),
        partition_warps=tuple(int(x) for x in re.findall(r"partition\d+\([^\n]*\) num_warps\((\d+)\)", ttgir)),
        requested_regs=_ints(r"requestedRegisters = array<i32: ([\d, ]+)>", ttgir),
        setmaxnreg=tuple(int(x) for x in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", ptx)),
    )
