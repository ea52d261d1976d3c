"""Op-kind templates: the Gluon text of one construct, given where the schedule put it.

These know instructions and layouts (TMA copies, mbarrier waits and arrivals, wgmma issue and
wait), never the schedule's decisions: the caller passes the ring, the channel, the iteration
expression, the wait depth and the comment naming the schedule fact that placed it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Iter", "slot", "phase", "wait_empty", "expect", "tma_load", "wait_full", "signal_full", "wgmma", "wgmma_wait",
           "release", "acc_layout", "turn_wait", "turn_pass", "ring_view", "named_barrier", "turn_token"]


@dataclass(frozen=True, slots=True)
class Iter:
    """Iteration index of an op as ``base + off``; base is '' (a constant), 't' (the steady loop
    variable, known >= lo) or the trip count (known >= 1)."""

    base: str
    off: int
    lo: int  # a lower bound of ``base`` ('' : 0)

    def expr(self) -> str:
        if not self.base:
            return str(self.off)
        return self.base if self.off == 0 else f"{self.base} {'+' if self.off > 0 else '-'} {abs(self.off)}"

    def shift(self, d: int) -> Iter:
        return Iter(self.base, self.off + d, self.lo)

    @property
    def min(self) -> int:
        return self.lo + self.off


def slot(j: Iter, depth: int) -> str:
    return f"({j.expr()}) % {depth}" if depth > 1 else "0"


def phase(j: Iter, depth: int) -> str:
    return f"(({j.expr()}) // {depth}) & 1"


def _pred(pred: str | None) -> str:
    return "" if pred is None else f", pred={pred}"


def wait_empty(ch: str, j: Iter, depth: int, pred: str | None, why: str) -> str:
    return (f"mbarrier.wait({ch}_empty.index({slot(j, depth)}), ({phase(j, depth)}) ^ 1{_pred(pred)})"
            f"  # producer acquires slot: {why}")


def expect(ch: str, j: Iter, depth: int, nbytes: int, pred: str | None, why: str) -> str:
    return f"mbarrier.expect({ch}_full.index({slot(j, depth)}), {nbytes}{_pred(pred)})  # {why}"


def tma_load(ring: str, desc: str, coord: str, ch: str, j: Iter, depth: int, pred: str | None, why: str) -> str:
    p = "" if pred is None else f", {pred}"
    return (f"tma.async_copy_global_to_shared({desc}, {coord}, {ch}_full.index({slot(j, depth)}), "
            f"{ring}_ring.index({slot(j, depth)}){p})  # {why}")


def wait_full(ch: str, j: Iter, depth: int, why: str, pred: str | None = None) -> str:
    return (f"mbarrier.wait({ch}_full.index({slot(j, depth)}), {phase(j, depth)}{_pred(pred)})"
            f"  # consumer waits data: {why}")


def signal_full(ch: str, j: Iter, depth: int, why: str) -> str:
    """The producer's arrival on a slot it filled from registers (a TMA fill completes by expect-tx)."""
    return f"mbarrier.arrive({ch}_full.index({slot(j, depth)}))  # producer publishes slot: {why}"


def ring_view(ring: str, depth: int, rows: tuple[int, int] | None, permute: bool, j: Iter) -> str:
    """The SMEM view a wgmma reads: iteration ``j``'s slot, optionally a row slice or transposed."""
    view = f"{ring}_ring.index({slot(j, depth)})"
    if rows is not None:
        view += f".slice({rows[0]}, {rows[1]})"
    return view + (".permute((1, 0))" if permute else "")


def wgmma(a: str, b: str, acc: str, use_acc: bool) -> str:
    return f"warpgroup_mma({a}, {b}, {acc}{'' if use_acc else ', use_acc=False'}, is_async=True)"


def turn_wait(position: int, j: Iter, why: str) -> str:
    """Wait for this group's turn on the tensor cores in iteration ``j``: the first group waits for
    the last group's previous turn (a fresh barrier lets iteration 0 through), the others for the
    turn of the group before them in this iteration."""
    parity = f"(({j.expr()}) & 1) ^ 1" if position == 0 else f"({j.expr()}) & 1"
    return f"mbarrier.wait(turn.index({position}), {parity})  # {why}"


def turn_pass(position: int, count: int, why: str, pred: str | None = None) -> str:
    return f"mbarrier.arrive(turn.index({(position + 1) % count}){_pred(pred)})  # {why}"


def turn_token(warps: int) -> str:
    """One int32 per thread of a ``warps``-warp partition: the operand that makes an inline-asm
    statement run exactly once in every thread (named barriers count threads)."""
    return (f"turn_tok = gl.full([{32 * warps}], 0, gl.int32, gl.BlockedLayout([1], [32], [{warps}], [0]))"
            "  # one element per thread: a named-barrier statement runs once in every thread")


def named_barrier(op: str, bar: int, threads: int, why: str) -> str:
    """``bar.sync`` (wait until ``threads`` threads have arrived, these included) or ``bar.arrive``
    (count these threads, do not wait) on hardware named barrier ``bar``: no SMEM, no polling, and no
    partition-wide ``bar.sync`` before the arrival (an mbarrier arrive from one thread needs one)."""
    assert op in ("sync", "arrive")
    return (f'gl.inline_asm_elementwise("bar.{op} {bar}, {threads};\\n\\tmov.b32 $0, $1;", "=r,r", [turn_tok], '
            f"dtype=gl.int32, is_pure=False, pack=1)  # {why}")


def wgmma_wait(values: list[str], depth: int, why: str) -> str:
    """Retire all but the ``depth`` newest wgmmas; ``values`` (their results and any register
    operands) are rebound to what the wait makes readable."""
    names = ", ".join(values)
    return f"{names} = warpgroup_mma_wait({depth}, deps=({names},))  # {why}"


def release(ch: str, j: Iter, depth: int, pred: str | None, why: str) -> str:
    return f"mbarrier.arrive({ch}_empty.index({slot(j, depth)}){_pred(pred)})  # consumer releases slot: {why}"


def acc_layout(warps: int, n: int) -> str:
    """wgmma accumulator layout of a ``warps``-warp group: warps stacked along M, instruction
    m64nNk16 per warpgroup (NVMMADistributedLayout v3)."""
    return f"gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[{warps}, 1], instr_shape=[16, {n}, 16])"
