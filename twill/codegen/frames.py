"""Per-program frames: what lies outside the scheduled loop, kept apart from the lowering.

A schedule says nothing about tile indexing, what the TMA coordinates of a load are, how the
accumulator starts, or how the result leaves the CTA; those are fixed per program (codegen.md §4.5
of the research dossier: "may legitimately be fixed per program"). A frame supplies exactly that
and nothing the schedule decides: no warps, registers, stages, ring depths, barriers or waits.

Frames are looked up by the schedule's program name. Every program-specific name or number the
generated code contains comes from here (the grep test in tests/test_codegen.py holds the other
codegen modules to that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twill.errors import TwillError

__all__ = ["RingSpec", "MmaSpec", "Frame", "GemmFrame", "frame_for", "FRAMES"]

GL_DTYPES = {"fp16": ("gl.float16", "torch.float16", "fp16", 2), "bf16": ("gl.bfloat16", "torch.bfloat16", "bf16", 2)}


@dataclass(frozen=True, slots=True)
class RingSpec:
    """The SMEM tile a load op fills: descriptor, box shape, and the coordinate of iteration ``j``."""

    desc: str
    block: tuple[int, ...]
    dtype: str  # gl dtype expression
    esize: int  # bytes per element
    coord: Callable[[str], str]  # iteration expression -> TMA coordinate list expression


@dataclass(frozen=True, slots=True)
class MmaSpec:
    """A tensor-core op: which loads feed its A and B operands, and its accumulator."""

    a: str  # producing op of the A operand (SMEM)
    a_rows: tuple[int, int] | None  # (first row, rows) of the A tile this MMA reads; None: all of it
    b: str  # producing op of the B operand (SMEM)
    b_permute: bool  # the B tile is stored K-minor ([n, k]) and read transposed
    acc: str
    acc_shape: tuple[int, int]


class Frame:
    """Interface every program frame implements (see GemmFrame for the one built-in)."""

    program: str = ""
    kernel_params: tuple[str, ...] = ()
    trip_count: str = "n_iter"

    def ring(self, op: str) -> RingSpec:
        raise NotImplementedError

    def mma(self, op: str) -> MmaSpec:
        raise NotImplementedError

    def prelude(self) -> list[str]:
        raise NotImplementedError

    def scalars(self) -> tuple[str, ...]:
        raise NotImplementedError

    def staging(self) -> list[tuple[str, str, tuple[int, ...], str, int]]:
        raise NotImplementedError

    def acc_init(self, spec: MmaSpec, layout: str) -> list[str]:
        raise NotImplementedError

    def epilogue(self, spec: MmaSpec) -> list[str]:
        raise NotImplementedError

    def host(self, kernel: str, launch: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def signature(self) -> dict[str, str]:
        raise NotImplementedError

    def acc_regs_per_thread(self, spec: MmaSpec, warps: int) -> int:
        """fp32 accumulator registers each thread of a ``warps``-warp group holds."""
        return spec.acc_shape[0] * spec.acc_shape[1] // (warps * 32)


class GemmFrame(Frame):
    """``programs/gemm.py``: C[M, N] = A[M, K] @ B[N, K]^T, one output tile per CTA.

    Frame choices (not in the schedule): grouped tile order (GROUP_M = 8 rows of tiles share B
    panels in L2, as Triton's tutorials do); A row-major [M, K] and B stored [N, K] (K-minor, the
    layout the program's ``load_b`` box ``block_n x block_k`` reads), so wgmma reads B through a
    transposed view; with ``subtiles`` > 1, MMA ``mma{j}`` reads rows j*block_m/subtiles.. of the A
    slot (an SMEM slice) into its own accumulator; each accumulator starts at zero; the epilogue
    converts it to the input dtype, stores it to its rows of an SMEM staging tile, fences and writes
    them with one TMA store (out-of-range rows and columns of M/N tails are clipped by TMA; K tails
    read zeros).
    """

    program = "gemm"
    kernel_params = ("a_desc", "b_desc", "c_desc", "M", "N", "K")
    GROUP_M = 8

    def __init__(self, params: dict[str, Any]):
        try:
            self.bm, self.bn, self.bk = int(params["block_m"]), int(params["block_n"]), int(params["block_k"])
            self.dtype = str(params["dtype"])
            self.sub = int(params.get("subtiles", 1))
        except (KeyError, TypeError, ValueError) as err:
            raise TwillError(f"gemm frame: schedule body lacks parameter {err}") from None
        if self.dtype not in GL_DTYPES:
            raise TwillError(f"gemm frame: dtype {self.dtype!r} has no Gluon lowering (have {sorted(GL_DTYPES)})")
        self.gl_dtype, self.torch_dtype, self.sig_dtype, self.esize = GL_DTYPES[self.dtype]

    def ring(self, op: str) -> RingSpec:
        if op == "load_a":
            return RingSpec("a_desc", (self.bm, self.bk), self.gl_dtype, self.esize, lambda j: f"[off_m, ({j}) * {self.bk}]")
        if op == "load_b":
            return RingSpec("b_desc", (self.bn, self.bk), self.gl_dtype, self.esize, lambda j: f"[off_n, ({j}) * {self.bk}]")
        raise TwillError(f"gemm frame: no TMA box for op {op!r}")

    def _subtile(self, op: str) -> int:
        names = ["mma"] if self.sub == 1 else [f"mma{j}" for j in range(self.sub)]
        if op not in names:
            raise TwillError(f"gemm frame: no operands for op {op!r}")
        return names.index(op)

    def mma(self, op: str) -> MmaSpec:
        j, rows = self._subtile(op), self.bm // self.sub
        return MmaSpec(a="load_a", a_rows=None if self.sub == 1 else (j * rows, rows), b="load_b", b_permute=True,
                       acc="acc" if self.sub == 1 else f"acc{j}", acc_shape=(rows, self.bn))

    def prelude(self) -> list[str]:
        g = self.GROUP_M
        return [
            "# frame (gemm): grouped tile order, GROUP_M tile rows share B panels in L2",
            f"num_pid_m = gl.cdiv(M, {self.bm})",
            f"num_pid_n = gl.cdiv(N, {self.bn})",
            "pid = gl.program_id(0)",
            f"group_id = pid // ({g} * num_pid_n)",
            f"first_pid_m = group_id * {g}",
            f"group_size_m = gl.minimum(num_pid_m - first_pid_m, {g})",
            "pid_m = first_pid_m + (pid % group_size_m)",
            "pid_n = (pid % (group_size_m * num_pid_n)) // group_size_m",
            f"off_m = pid_m * {self.bm}",
            f"off_n = pid_n * {self.bn}",
            f"n_iter = gl.cdiv(K, {self.bk})  # frame: loop trip count (K tail read as zeros by TMA)",
        ]

    def scalars(self) -> tuple[str, ...]:
        return ("off_m", "off_n", "n_iter")

    def staging(self) -> list[tuple[str, str, tuple[int, ...], str, int]]:
        return [("c_smem", self.gl_dtype, (self.bm, self.bn), "c_desc.layout", self.bm * self.bn * self.esize)]

    def acc_init(self, spec: MmaSpec, layout: str) -> list[str]:
        m, n = spec.acc_shape
        return [f"{spec.acc} = gl.zeros(({m}, {n}), dtype=gl.float32, layout={layout})  # frame: C starts at 0"]

    def epilogue(self, spec: MmaSpec) -> list[str]:
        first, rows = spec.a_rows or (0, self.bm)
        view = "c_smem" if spec.a_rows is None else f"c_smem.slice({first}, {rows})"
        return [
            f"{view}.store({spec.acc}.to({self.gl_dtype}))  # frame: epilogue, accumulator -> SMEM",
            "fence_async_shared()  # frame: generic SMEM write before the async-proxy TMA store",
            f"tma.async_copy_shared_to_global(c_desc, [off_m{f' + {first}' if first else ''}, off_n], {view})",
            "tma.store_wait(0)",
        ]

    def _layout(self, shape: tuple[int, int]) -> str:
        return f"gl.NVMMASharedLayout.get_default_for([{shape[0]}, {shape[1]}], {self.gl_dtype})"

    def host(self, kernel: str, launch: dict[str, Any]) -> list[str]:
        opts = ", ".join(f"{k}={v}" for k, v in launch.items())
        return [
            "def launch(a, b, c):",
            '    """C = A @ B^T for A [M, K], B [N, K], C [M, N] (CUDA tensors of the schedule\'s dtype)."""',
            "    M, K = a.shape",
            "    N = b.shape[0]",
            f"    a_desc = TensorDescriptor.from_tensor(a, [{self.bm}, {self.bk}], {self._layout((self.bm, self.bk))})",
            f"    b_desc = TensorDescriptor.from_tensor(b, [{self.bn}, {self.bk}], {self._layout((self.bn, self.bk))})",
            f"    c_desc = TensorDescriptor.from_tensor(c, [{self.bm // self.sub}, {self.bn}], "
            f"{self._layout((self.bm // self.sub, self.bn))})",
            f"    grid = (triton.cdiv(M, {self.bm}) * triton.cdiv(N, {self.bn}),)",
            f"    return {kernel}[grid](a_desc, b_desc, c_desc, M, N, K, {opts})",
        ]

    def signature(self) -> dict[str, str]:
        """Argument types for compiling without a GPU (``GluonASTSource``)."""
        from triton.experimental.gluon import language as gl

        dt = {"fp16": gl.float16, "bf16": gl.bfloat16}[self.dtype]

        def desc(shape: tuple[int, int]) -> str:
            layout = gl.NVMMASharedLayout.get_default_for(list(shape), dt)
            return f"tensordesc<{self.sig_dtype}[{shape[0]}, {shape[1]}],{layout!r}>"

        return {"a_desc": desc((self.bm, self.bk)), "b_desc": desc((self.bn, self.bk)),
                "c_desc": desc((self.bm // self.sub, self.bn)), "M": "i32", "N": "i32", "K": "i32"}


FRAMES: dict[str, Callable[[dict[str, Any]], Frame]] = {"gemm": GemmFrame}


def frame_for(program: str, params: dict[str, Any]) -> Frame:
    """The frame of ``program``; a program without one cannot be lowered yet."""
    if program not in FRAMES:
        raise TwillError(f"codegen: no frame for program {program!r} (frames: {', '.join(sorted(FRAMES))})")
    return FRAMES[program](params)
