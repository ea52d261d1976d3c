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

__all__ = ["Compiled", "load_module", "compile_generated", "disassemble", "loop_wgmmas"]


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


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin by the ``nvdisasm`` bundled with Triton (runs without a GPU)."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        out = subprocess.run([str(tool), "-c", str(f)], capture_output=True, text=True, check=True)
    return out.stdout


_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"^@!?P\d+\s+BRA\s+`\((\.L_x_\d+)\)")


def loop_wgmmas(sass: str) -> list[list[list[str]]]:
    """The wgmmas of every loop of a kernel, as SASS: for each loop (a predicated branch back to a
    label, spanning at least one HGMMA), its wgmmas in order, each the instructions from its first
    HGMMA to its last (the one that commits the group, ``gsb0``)."""
    instrs: list[tuple[int, str]] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            instrs.append((addr, m.group(2)))
    loops = []
    for addr, text in instrs:
        m = _BRANCH.match(text)
        if not m or labels.get(m.group(1), addr) >= addr:
            continue
        body = [t for a, t in instrs if labels[m.group(1)] <= a <= addr]
        groups, cur = [], None
        for t in body:
            if "HGMMA" in t and cur is None:
                cur = []
            if cur is not None:
                cur.append(t)
                if "HGMMA" in t and "gsb0" in t:
                    groups.append(cur)
                    cur = None
        if groups:
            loops.append(groups)
    return loops
