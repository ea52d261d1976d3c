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

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twill.errors import TwillError

__all__ = ["RingSpec", "MmaSpec", "ValueSpec", "Frame", "GemmFrame", "FaFwdFrame", "frame_for", "FRAMES"]

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
    """A tensor-core op: where its A and B operands come from, and its accumulator.

    ``a_from`` says what ``a`` names: 'ring' (the SMEM ring a load op fills), 'smem' (a frame
    buffer loaded outside the loop) or 'regs' (the register value of an op in the same group: RS
    wgmma). ``acc_from`` is the op whose value (``acc_distance`` iterations back) is accumulated
    into in place; None starts from zero (``use_acc=False``)."""

    a: str
    a_rows: tuple[int, int] | None  # (first row, rows) of the A tile this MMA reads; None: all of it
    b: str  # producing op of the B operand (SMEM)
    b_permute: bool  # the B tile is stored K-minor ([n, k]) and read transposed
    acc: str  # the accumulator's variable name
    acc_shape: tuple[int, int]
    a_from: str = "ring"
    acc_from: str | None = None
    acc_distance: int = 0


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """A register value as another group receives it through SMEM: its shape and element type, the
    distributed layout the reader loads it into (a Gluon expression in the reader's partition), and
    the MMAs whose ``{acc}_layout`` that expression names (the reader defines them over its warps)."""

    shape: tuple[int, ...]
    dtype: str  # gl dtype expression
    esize: int
    layout: str
    needs: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.esize

    @property
    def smem_layout(self) -> str:
        """Row-major 2-D values take the NVMMA swizzle of their row width (the layout a wgmma reading the
        slot as its operand needs); a row vector is unswizzled."""
        if len(self.shape) == 2:
            return f"gl.NVMMASharedLayout.get_default_for({list(self.shape)}, {self.dtype})"
        return "gl.SwizzledSharedLayout(1, 1, 1, order=[0])"


class Frame:
    """Interface every program frame implements (see GemmFrame for the one built-in)."""

    program: str = ""
    dtype: str = "fp16"
    gl_dtype: str = "gl.float16"
    sig_dtype: str = "fp16"
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

    def var(self, op: str) -> str:
        """The variable that holds a register op's value (an MMA's is its ``acc``)."""
        return op

    def init(self, op: str, spec: MmaSpec | None) -> str | None:
        """The value of ``op`` before iteration 0 (a recurrence's start), or None if none is read."""
        raise NotImplementedError

    def compute(self, op: str, read: Callable[[str, int], str]) -> str:
        """The expression of a register op; ``read(producer, distance)`` names the variable holding
        the producer's value ``distance`` iterations back (the emitter checks each is an edge)."""
        raise TwillError(f"{self.program} frame: op {op!r} has no register computation")

    def after_alloc(self) -> list[str]:
        """Kernel lines after SMEM and barriers are allocated, before the partitions start."""
        return []

    def value(self, op: str) -> ValueSpec:
        """How ``op``'s register value is received by another group (register hand-offs)."""
        raise TwillError(f"the {self.program} frame gives {op!r} no hand-off value")

    def outputs(self) -> tuple[str, ...]:
        """Ops whose last value leaves the loop; ``finish`` writes it."""
        raise NotImplementedError

    def finish(self, op: str, spec: MmaSpec, read: Callable[[str, int], str]) -> list[str]:
        """Lines after the loop that write ``op``'s last value out (``read(x, 0)``: the last iteration's)."""
        raise NotImplementedError

    def host(self, kernel: str, launch: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def signature(self) -> dict[str, str]:
        raise NotImplementedError

    def _read_params(self, params: dict[str, Any], ints: tuple[str, ...]) -> tuple[int, ...]:
        """The tile parameters ``ints``, and the dtype and sub-tile count every frame reads; one line
        naming what is missing or has no Gluon lowering."""
        try:
            values = tuple(int(params[k]) for k in ints)
            self.dtype = str(params["dtype"])
            self.sub = int(params.get("subtiles", 1))
        except (KeyError, TypeError, ValueError) as err:
            raise TwillError(f"{self.program} frame: schedule body lacks parameter {err}") from None
        if self.dtype not in GL_DTYPES:
            raise TwillError(f"{self.program} frame: dtype {self.dtype!r} has no Gluon lowering "
                             f"(have {sorted(GL_DTYPES)})")
        self.gl_dtype, self.torch_dtype, self.sig_dtype, self.esize = GL_DTYPES[self.dtype]
        return values

    @staticmethod
    def _store_tile(view: str, value: str, desc: str, coord: str) -> list[str]:
        """The result leaves the CTA: registers -> SMEM staging, a proxy fence, one TMA store."""
        return [
            f"{view}.store({value})  # frame: epilogue, result -> SMEM",
            "fence_async_shared()  # frame: generic SMEM write before the async-proxy TMA store",
            f"tma.async_copy_shared_to_global({desc}, [{coord}], {view})",
            "tma.store_wait(0)",
        ]

    def _layout(self, shape: tuple[int, int]) -> str:
        """The NVMMA shared layout of a TMA box (as generated source)."""
        return f"gl.NVMMASharedLayout.get_default_for([{shape[0]}, {shape[1]}], {self.gl_dtype})"

    def _desc_type(self, shape: tuple[int, int]) -> str:
        """A tensor descriptor's signature type for compiling without a GPU (``GluonASTSource``)."""
        from triton.experimental.gluon import language as gl

        dt = {"fp16": gl.float16, "bf16": gl.bfloat16}[self.dtype]
        layout = gl.NVMMASharedLayout.get_default_for(list(shape), dt)
        return f"tensordesc<{self.sig_dtype}[{shape[0]}, {shape[1]}],{layout!r}>"

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
        self.bm, self.bn, self.bk = self._read_params(params, ("block_m", "block_n", "block_k"))

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
                       acc="acc" if self.sub == 1 else f"acc{j}", acc_shape=(rows, self.bn), acc_from=op,
                       acc_distance=1)

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

    def init(self, op: str, spec: MmaSpec | None) -> str | None:
        m, n = spec.acc_shape
        return f"gl.zeros(({m}, {n}), dtype=gl.float32, layout={spec.acc}_layout)  # frame: C starts at 0"

    def outputs(self) -> tuple[str, ...]:
        return ("mma",) if self.sub == 1 else tuple(f"mma{j}" for j in range(self.sub))

    def finish(self, op: str, spec: MmaSpec, read: Callable[[str, int], str]) -> list[str]:
        first, rows = spec.a_rows or (0, self.bm)
        view = "c_smem" if spec.a_rows is None else f"c_smem.slice({first}, {rows})"
        return self._store_tile(view, f"{read(op, 0)}.to({self.gl_dtype})", "c_desc",
                                f"off_m{f' + {first}' if first else ''}, off_n")

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
        desc = self._desc_type
        return {"a_desc": desc((self.bm, self.bk)), "b_desc": desc((self.bn, self.bk)),
                "c_desc": desc((self.bm // self.sub, self.bn)), "M": "i32", "N": "i32", "K": "i32"}


class FaFwdFrame(Frame):
    """``programs/fa_fwd.py`` on Hopper: O = softmax(Q·Kᵀ·scale)·V, one ``block_m``-row Q tile per CTA.

    Frame choices (not in the schedule): q, k, v and o are [B, H, S, D] tensors viewed as
    [B·H·S, D]; CTA (m, bh) takes Q rows bh·S + m·block_m and walks the S / block_n KV blocks of
    head bh (non-causal; S must be a multiple of block_m and block_n, checked by the launcher);
    the Q tile is loaded once with TMA before the partitions start; Q·Kᵀ reads Q rows
    j·rows.. (sub-tile j) from SMEM and K through a transposed view, into a fresh fp32 S;
    the softmax works in base 2 (``qk_scale`` = sm_scale·log2 e); the running max starts at -inf
    and the row sum and O at 0; P is cast to the input dtype in wgmma's register-A layout (RS
    wgmma); after the loop O / l is staged in Q's SMEM rows of its sub-tile and leaves by one TMA store each.
    """

    program = "fa_fwd"
    kernel_params = ("q_desc", "k_desc", "v_desc", "o_desc", "qk_scale", "seqlen")
    LOG2E = 1.4426950408889634

    def __init__(self, params: dict[str, Any]):
        self.bm, self.bn, self.d = self._read_params(params, ("block_m", "block_n", "head_dim"))
        if int(params.get("s_frags", 0)):
            raise TwillError("fa_fwd frame: s_frags (FA4's TMEM streaming) has no Hopper lowering")
        self.rows = self.bm // self.sub

    def ring(self, op: str) -> RingSpec:
        if op in ("load_k", "load_v"):
            desc = f"{op[-1]}_desc"
            return RingSpec(desc, (self.bn, self.d), self.gl_dtype, self.esize,
                            lambda j: f"[kv_row + ({j}) * {self.bn}, 0]")
        raise TwillError(f"fa_fwd frame: no TMA box for op {op!r}")

    def _tile(self, op: str, prefix: str) -> int:
        j = op[len(prefix):]
        if not op.startswith(prefix) or not j.isdigit() or int(j) >= self.sub:
            raise TwillError(f"fa_fwd frame: no operands for op {op!r}")
        return int(j)

    def mma(self, op: str) -> MmaSpec:
        rows = self.rows
        if op.startswith("qk"):
            j = self._tile(op, "qk")
            return MmaSpec(a="q_smem", a_from="smem", a_rows=None if self.sub == 1 else (j * rows, rows),
                           b="load_k", b_permute=True, acc=f"s{j}", acc_shape=(rows, self.bn))
        j = self._tile(op, "pv")
        return MmaSpec(a=f"cast{j}", a_from="regs", a_rows=None, b="load_v", b_permute=False, acc=f"o{j}",
                       acc_shape=(rows, self.d), acc_from=f"rescale{j}", acc_distance=0)

    def prelude(self) -> list[str]:
        return [
            "# frame (fa_fwd): CTA (m, bh) takes Q rows m*block_m.. of head bh; K/V rows of head bh",
            "pid_m = gl.program_id(0)",
            "off_bh = gl.program_id(1)",
            f"q_row = off_bh * seqlen + pid_m * {self.bm}",
            "kv_row = off_bh * seqlen",
            f"n_iter = seqlen // {self.bn}  # frame: loop trip count (the launcher checks block_n divides S)",
        ]

    def scalars(self) -> tuple[str, ...]:
        return ("q_row", "kv_row", "n_iter", "qk_scale")

    def staging(self) -> list[tuple[str, str, tuple[int, ...], str, int]]:
        tile = self.bm * self.d * self.esize
        # no O tile of its own: the epilogue stages each sub-tile's O in that sub-tile's rows of Q,
        # which its last Q·Kᵀ has read before its last P·V can issue (P·V(n-1) depends on Q·Kᵀ(n-1)
        # of the same sub-tile through exp and cast); programs/fa_fwd.py counts Q alone
        return [("q_smem", self.gl_dtype, (self.bm, self.d), "q_desc.layout", tile),
                ("q_bar", "gl.int64", (1, 1), "mbarrier.MBarrierLayout()", 8)]

    def after_alloc(self) -> list[str]:
        return [
            "mbarrier.init(q_bar.index(0), count=1)  # frame: the Q tile, loaded once before the loop",
            f"mbarrier.expect(q_bar.index(0), {self.bm * self.d * self.esize})",
            "tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar.index(0), q_smem)",
            "mbarrier.wait(q_bar.index(0), 0)",
        ]

    def _rowvec(self, j: int) -> str:
        return f"gl.SliceLayout(1, s{j}_layout)"

    def init(self, op: str, spec: MmaSpec | None) -> str | None:
        if op.startswith("max"):
            j = self._tile(op, "max")
            return f"gl.full([{self.rows}], float('-inf'), gl.float32, layout={self._rowvec(j)})  # frame: m = -inf"
        if op.startswith("rowsum"):
            j = self._tile(op, "rowsum")
            return f"gl.zeros([{self.rows}], gl.float32, layout={self._rowvec(j)})  # frame: l = 0"
        if op.startswith("pv"):
            return f"gl.zeros([{self.rows}, {self.d}], gl.float32, layout={spec.acc}_layout)  # frame: O = 0"
        return None

    def compute(self, op: str, read: Callable[[str, int], str]) -> str:
        role = op.rstrip("0123456789")
        j = self._tile(op, role)
        exprs = {
            "rowmax": lambda: f"gl.max({read(f'qk{j}', 0)}, axis=1)",
            "max": lambda: f"gl.maximum({read(f'max{j}', 1)}, {read(f'rowmax{j}', 0)} * qk_scale)",
            "alpha": lambda: f"gl.exp2({read(f'max{j}', 1)} - {read(f'max{j}', 0)})",
            "exp": lambda: f"gl.exp2({read(f'qk{j}', 0)} * qk_scale - {read(f'max{j}', 0)}[:, None])",
            "rowsum": lambda: f"{read(f'rowsum{j}', 1)} * {read(f'alpha{j}', 0)} + gl.sum({read(f'exp{j}', 0)}, axis=1)",
            "cast": lambda: (f"gl.convert_layout({read(f'exp{j}', 0)}.to({self.gl_dtype}), "
                             f"gl.DotOperandLayout(operand_index=0, parent=o{j}_layout, k_width=2))"),
            "rescale": lambda: (f"{read(f'pv{j}', 1)} * gl.convert_layout({read(f'alpha{j}', 0)}, "
                                f"gl.SliceLayout(1, o{j}_layout))[:, None]"),
        }
        if role not in exprs:
            raise TwillError(f"fa_fwd frame: op {op!r} has no register computation")
        return exprs[role]()

    def value(self, op: str) -> ValueSpec:
        role = op.rstrip("0123456789")
        j = self._tile(op, role)
        tile, row = (self.rows, self.bn), (self.rows,)
        specs = {  # (shape, dtype, esize, layout, the MMA whose accumulator layout it derives from)
            "qk": (tile, "gl.float32", 4, f"s{j}_layout", f"qk{j}"),
            "exp": (tile, "gl.float32", 4, f"s{j}_layout", f"qk{j}"),
            "rowmax": (row, "gl.float32", 4, self._rowvec(j), f"qk{j}"),
            "max": (row, "gl.float32", 4, self._rowvec(j), f"qk{j}"),
            "alpha": (row, "gl.float32", 4, self._rowvec(j), f"qk{j}"),
            "rowsum": (row, "gl.float32", 4, self._rowvec(j), f"qk{j}"),
            "cast": (tile, self.gl_dtype, self.esize,
                     f"gl.DotOperandLayout(operand_index=0, parent=o{j}_layout, k_width=2)", f"pv{j}"),
            "rescale": ((self.rows, self.d), "gl.float32", 4, f"o{j}_layout", f"pv{j}"),
        }
        if role not in specs:
            raise TwillError(f"fa_fwd frame: op {op!r} has no hand-off value")
        shape, dtype, esize, layout, mma = specs[role]
        return ValueSpec(shape, dtype, esize, layout, (mma,))

    def outputs(self) -> tuple[str, ...]:
        return tuple(f"pv{j}" for j in range(self.sub))

    def finish(self, op: str, spec: MmaSpec, read: Callable[[str, int], str]) -> list[str]:
        j = self._tile(op, "pv")
        first = j * self.rows
        view = "q_smem" if self.sub == 1 else f"q_smem.slice({first}, {self.rows})"  # O staged over Q's rows
        inv = f"gl.convert_layout(1.0 / {read(f'rowsum{j}', 0)}, gl.SliceLayout(1, o{j}_layout))"
        return self._store_tile(view, f"({read(op, 0)} * {inv}[:, None]).to({self.gl_dtype})", "o_desc",
                                f"q_row{f' + {first}' if first else ''}, 0")

    def host(self, kernel: str, launch: dict[str, Any]) -> list[str]:
        opts = ", ".join(f"{k}={v}" for k, v in launch.items())
        step = math.lcm(self.bm, self.bn)
        return [
            "def launch(q, k, v, o, sm_scale):",
            '    """O = softmax(Q Kᵀ sm_scale) V for q, k, v, o of shape [B, H, S, D] (contiguous CUDA tensors of the',
            "    schedule's dtype; non-causal; S a multiple of block_m and block_n).\"\"\"",
            "    B, H, S, D = q.shape",
            f"    if D != {self.d} or S % {step}:",
            f"        raise ValueError(f'head dim {{D}} must be {self.d} and S {{S}} a multiple of {step}')",
            "    q2, k2, v2, o2 = (t.reshape(B * H * S, D) for t in (q, k, v, o))",
            f"    q_desc = TensorDescriptor.from_tensor(q2, [{self.bm}, {self.d}], {self._layout((self.bm, self.d))})",
            f"    k_desc = TensorDescriptor.from_tensor(k2, [{self.bn}, {self.d}], {self._layout((self.bn, self.d))})",
            f"    v_desc = TensorDescriptor.from_tensor(v2, [{self.bn}, {self.d}], {self._layout((self.bn, self.d))})",
            f"    o_desc = TensorDescriptor.from_tensor(o2, [{self.rows}, {self.d}], {self._layout((self.rows, self.d))})",
            f"    grid = (S // {self.bm}, B * H)",
            f"    return {kernel}[grid](q_desc, k_desc, v_desc, o_desc, sm_scale * {self.LOG2E}, S, {opts})",
        ]

    def signature(self) -> dict[str, str]:
        desc = self._desc_type
        return {"q_desc": desc((self.bm, self.d)), "k_desc": desc((self.bn, self.d)), "v_desc": desc((self.bn, self.d)),
                "o_desc": desc((self.rows, self.d)), "qk_scale": "fp32", "seqlen": "i32"}


FRAMES: dict[str, Callable[[dict[str, Any]], Frame]] = {"gemm": GemmFrame, "fa_fwd": FaFwdFrame}


def frame_for(program: str, params: dict[str, Any]) -> Frame:
    """The frame of ``program``; a program without one cannot be lowered yet."""
    if program not in FRAMES:
        raise TwillError(f"codegen: no frame for program {program!r} (frames: {', '.join(sorted(FRAMES))})")
    return FRAMES[program](params)
