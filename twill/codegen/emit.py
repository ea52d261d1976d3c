"""Schedule-driven structure: one Gluon source file from a lowering plan.

Layout of the output: a header naming the schedule, one ``@gluon.jit`` function per partition
(group), the kernel (frame prelude, rings, barriers, ``warp_specialize``), and the frame's host
launcher. Every line that carries a schedule decision ends with a comment naming that decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twill.codegen import templates as T
from twill.codegen.plan import Channel, CodegenError, Partition, Plan
from twill.codegen.protocol import check_turns
from twill.ir import Carrier

__all__ = ["emit_source"]

IND = "    "


def _needs_upper_guard(j: T.Iter) -> bool:
    """Whether ``j < trip count`` can fail (the trip count is only known to be >= 1)."""
    if not j.base:
        return j.off >= 1
    return j.off > 0


def _key(j: T.Iter) -> tuple[str, int]:
    return (j.base, j.off)


@dataclass(slots=True)
class _State:
    """What the emitted code holds at the current point: for each op the iterations its value
    variables hold ([var, var_p1, ...], newest first), the wgmmas issued and not yet retired (in
    issue order), and per tensor-core window (turn position) the rounds whose turn was taken and not
    yet passed (oldest first)."""

    hist: dict[str, list[T.Iter]] = field(default_factory=dict)
    inflight: list[tuple[str, T.Iter]] = field(default_factory=list)
    open_turns: dict[int, list[T.Iter]] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)  # variables typed as in-flight wgmma accumulators

    def rebase(self, f) -> _State:
        return _State({k: [f(j) for j in v] for k, v in self.hist.items()}, [(o, f(j)) for o, j in self.inflight],
                      {p: [f(j) for j in v] for p, v in self.open_turns.items()}, set(self.tokens))

    def in_flight(self, op: str, j: T.Iter) -> int | None:
        """Position of ``op``'s wgmma of iteration ``j`` among those in flight (None: not in flight)."""
        return next((i for i, (o, x) in enumerate(self.inflight) if o == op and _key(x) == _key(j)), None)

    def signature(self) -> tuple:
        return ({k: [_key(j) for j in v] for k, v in self.hist.items()}, [(o, _key(j)) for o, j in self.inflight],
                {p: [_key(j) for j in v] for p, v in self.open_turns.items() if v}, sorted(self.tokens))

    def is_open(self, position: int, rnd: T.Iter) -> bool:
        return _key(rnd) in [_key(j) for j in self.open_turns.get(position, [])]


class _Body:
    """Lines of one partition function with the schedule facts in comments.

    Emission replays the partition's program (prologue, one steady-state body, epilogue) on a
    ``_State``, so every read names the variable that holds the right iteration of its producer
    (modulo variable expansion by rotation copies, ``depth`` of them per op), every wgmma is retired
    before its value is read, and every tensor-core turn taken is passed."""

    def __init__(self, plan: Plan, part: Partition, depth: dict[str, int]):
        self.plan, self.part, self.lines = plan, part, []
        self.n = plan.frame.trip_count
        self.depth = depth  # rotation copies per op
        self.used: dict[str, int] = {}  # deepest copy read per op (sizes ``depth``)
        self.st = _State()
        self.assigned: set[str] = set()  # ops bound so far in the current loop step
        self.top_reads: set[tuple[str, int]] = set()  # (op, copy) read before the step rebinds op

    def add(self, line: str, depth: int = 1) -> None:
        self.lines.append(IND * depth + line)

    def _channel_first(self, ch: Channel, op: str) -> bool:
        mine = [o for o in self.part.ops if any(r.op == o for r in ch.rings)]
        return mine[0] == op

    # ---- values --------------------------------------------------------------------------------
    def name(self, op: str, i: int) -> str:
        v = self.plan.var(op)
        return v if i == 0 else f"{v}_p{i}"

    def lookup(self, op: str, j: T.Iter, record: bool = True) -> str | None:
        held = [_key(x) for x in self.st.hist.get(op, [])]
        if _key(j) not in held:
            return None
        i = held.index(_key(j))
        if record:
            self.used[op] = max(self.used.get(op, 0), i)
            if op not in self.assigned:
                self.top_reads.add((op, i))
        return self.name(op, i)

    def read(self, op: str, j: T.Iter, reader: str, depth: int, retire: bool = True) -> str:
        """The variable holding ``op``'s value of iteration ``j``, retired first if in flight (unless
        ``retire`` is off: a wgmma chaining an accumulator still in flight)."""
        pos = self.st.in_flight(op, j) if retire else None
        if pos is not None:
            self.wait(len(self.st.inflight) - 1 - pos, f"{reader} reads {op} of iteration {j.expr()}: retire it first",
                      depth)
        name = self.lookup(op, j)
        if name is None and self._receives(op):
            self.receive(op, j, depth)
            name = self.lookup(op, j)
        if name is None:
            raise CodegenError(f"codegen: {reader} reads {op} of iteration {j.expr()}, which no variable holds at "
                               f"that point in group {self.part.group}'s program")
        return name

    def assign(self, op: str, j: T.Iter, expr: str, why: str, depth: int) -> None:
        """Rotate ``op``'s older values one copy down (as deep as its readers need), then bind the new one."""
        held = self.st.hist.get(op, [])
        keep = self.depth.get(op, 0)
        for i in range(min(keep, len(held)), 0, -1):
            if op not in self.assigned:
                self.top_reads.add((op, i - 1))
            self.add(f"{self.name(op, i)} = {self.name(op, i - 1)}  # keep {op} of iteration "
                     f"{held[i - 1].expr()} for a reader {i} step(s) on", depth)
            self.st.tokens.discard(self.name(op, i))
            if self.name(op, i - 1) in self.st.tokens:
                self.st.tokens.add(self.name(op, i))
        self.st.hist[op] = [j] + held[:keep]
        self.assigned.add(op)
        self.add(f"{self.name(op, 0)} = {expr}  # {why}", depth)
        self.st.tokens.discard(self.name(op, 0))
        if self.plan.kind(op) == "wgmma":
            self.st.tokens.add(self.name(op, 0))

    def reader(self, op: str, j: T.Iter, depth: int):
        def read(src: str, distance: int) -> str:
            if not self.plan.register_edge(src, op, distance):
                raise CodegenError(f"codegen: the {self.plan.frame.program} frame reads {src} (distance {distance}) "
                                   f"for {op}, but the body has no such register edge")
            return self.read(src, j.shift(-distance), op, depth)
        return read

    # ---- register hand-offs ------------------------------------------------------------------------
    def _receives(self, op: str) -> bool:
        h = self.plan.handoffs.get(op)
        return h is not None and self.part.group in h.reader_groups and op not in self.part.ops

    def _operand_slot(self, op: str, src: str, j: T.Iter, depth: int) -> str:
        """A wgmma's A operand handed off by another group: wait for the slot, read it in place (SS wgmma); the
        slot is released when the wgmma retires (``release``)."""
        h = self.plan.handoffs[src]
        self.add(T.wait_full(h.name, j, h.copies, f"{src} handed off by group {h.group}, read in place by {op}"),
                 depth)
        return f"{h.name}.index({T.slot(j, h.copies)})"

    def _sync(self, depth: int, why: str) -> None:
        """A partition-wide barrier before one thread's mbarrier arrival speaks for every warp."""
        if self.part.warps > 1:
            self.add(f"gl.thread_barrier()  # {why}", depth)

    def send(self, op: str, j: T.Iter, depth: int) -> None:
        """Hand ``op`` of iteration ``j`` to the groups that read it: wait for its slot to be free, store,
        publish. Only iterations that exist are sent (a peeled prologue step may compute one past the last)."""
        h = self.plan.handoffs[op]
        if _needs_upper_guard(j):
            self.add(f"if {j.expr()} < {self.n}:  # hand off only iterations that exist", depth)
            depth += 1
        to = f"{op} of iteration {j.expr()} to group(s) {list(h.reader_groups)} ({', '.join(h.readers)})"
        self.add(T.wait_empty(h.name, j, h.copies, None, f"{h.name}: {h.copies_from}"), depth)
        self.add(f"{h.name}.index({T.slot(j, h.copies)}).store({self.name(op, 0)})  # register hand-off: {to}",
                 depth)
        if h.async_read:
            self.add(f"fence_async_shared()  # a wgmma ({', '.join(h.operand)}) reads the slot through the async proxy",
                     depth)
        self._sync(depth, "every warp has stored its part before the slot is published")
        self.add(T.signal_full(h.name, j, h.copies, to), depth)

    def receive(self, op: str, j: T.Iter, depth: int) -> None:
        """Load ``op`` of iteration ``j`` from the producer's hand-off slot into this group's registers and
        free the slot (wait and release only for iterations that exist; the load itself is harmless)."""
        h = self.plan.handoffs[op]
        pred = f"{j.expr()} < {self.n}" if _needs_upper_guard(j) else None
        self.add(T.wait_full(h.name, j, h.copies, f"{op} handed off by group {h.group}", pred), depth)
        self.assign(op, j, f"{h.name}.index({T.slot(j, h.copies)}).load({h.value.layout})",
                    f"{op} of iteration {j.expr()} from group {h.group}'s registers, through SMEM", depth)
        self._sync(depth, "every warp has loaded before the slot is released")
        self.add(T.release(h.name, j, h.copies, pred, f"group {self.part.group} holds {op} of iteration "
                                                      f"{j.expr()} in registers"), depth)

    # ---- ops -----------------------------------------------------------------------------------
    def load(self, op: str, j: T.Iter, depth: int) -> None:
        plan, sched = self.plan, self.plan.schedule
        ring = plan.rings[op]
        ch = plan.channel_of(op)
        pred = f"{j.expr()} < {self.n}" if _needs_upper_guard(j) else None
        o = sched.op(op)
        where = f"{op}: group {o.group}, stage {o.stage}, offset {o.offset}"
        if self._channel_first(ch, op):
            if ch.cross:
                self.add(T.wait_empty(ch.name, j, ch.copies, pred,
                                      f"{ch.name} ring depth {ch.copies} ({'; '.join(r.copies_from for r in ch.rings)}); "
                                      f"readers in groups "
                                      f"{list(ch.reader_groups)}"), depth)
            self.add(T.expect(ch.name, j, ch.copies, ch.expect_bytes, pred,
                              f"{ch.name}: expect-tx {ch.expect_bytes} B = "
                              + " + ".join(f"{r.op} {r.slot_bytes} B" for r in ch.rings)), depth)
        self.add(T.tma_load(op, ring.spec.desc, ring.spec.coord(j.expr()), ch.name, j, ch.copies, pred, where), depth)

    def compute(self, op: str, j: T.Iter, depth: int) -> None:
        o = self.plan.schedule.op(op)
        expr = self.plan.frame.compute(op, self.reader(op, j, depth))
        self.assign(op, j, expr, f"{op} of iteration {j.expr()}: group {o.group}, stage {o.stage}, offset {o.offset}",
                    depth)
        if op in self.plan.handoffs:
            self.send(op, j, depth)

    def _operand_a(self, op: str, spec, j: T.Iter, depth: int) -> str:
        h = self.plan.handoffs.get(spec.a) if spec.a_from == "regs" else None
        if h is not None and op in h.operand:
            return self._operand_slot(op, spec.a, j, depth)
        if spec.a_from == "regs":
            return self.reader(op, j, depth)(spec.a, 0)
        if spec.a_from == "smem":
            return spec.a + ("" if spec.a_rows is None else f".slice({spec.a_rows[0]}, {spec.a_rows[1]})")
        return T.ring_view(spec.a, self.plan.rings[spec.a].copies, spec.a_rows, False, j)

    def mma(self, op: str, j: T.Iter, depth: int, hold: bool = False) -> None:
        """Issue ``op`` of iteration ``j`` (data and turn waits first, the turn pass after); ``hold``:
        leave the retires it triggers to the caller (rule 12: register ops deferred behind it come first)."""
        plan, sched = self.plan, self.plan.schedule
        spec = plan.mmas[op]
        o = sched.op(op)
        guard = f"{j.expr()} < {self.n}" if _needs_upper_guard(j) else None
        if guard:
            self.add(f"if {guard}:  # peeled step: {op} runs only for iterations that exist", depth)
            depth += 1
        seen: list[Channel] = []
        for src in ([spec.a] if spec.a_from == "ring" else []) + [spec.b]:
            ch = plan.channel_of(src)
            if ch not in seen:
                seen.append(ch)
                self.add(T.wait_full(ch.name, j, ch.copies,
                                     f"{ch.name} filled by group {ch.producer}"
                                     + ("" if ch.cross else " (same group: TMA completion only)")), depth)
        a = self._operand_a(op, spec, j, depth)  # a hand-off's wait comes before the turn, as a ring's does
        win = plan.window_of(op)
        if win is not None and (op == win.first or self._opens_partial(win, op, j)):
            self.open_turn(win, j.shift(win.rounds[op]), depth)
        b = T.ring_view(spec.b, plan.rings[spec.b].copies, None, spec.b_permute, j)
        if spec.acc_from is None:
            # donate the op's own previous tile (dead by its next issue; tokens excepted): a fresh
            # placeholder per issue would pin a loop-invariant tile's worth of registers
            acc, use = self.lookup(op, self.st.hist[op][0]), False
        else:
            acc, use = self.read(spec.acc_from, j.shift(-spec.acc_distance), op, depth, retire=False), True
        self.assign(op, j, T.wgmma(a, b, acc, use), f"{op}: group {o.group}, stage {o.stage}, offset {o.offset}; "
                    + ("accumulator chained in place" if use else "fresh accumulator"), depth)
        self.st.inflight.append((op, j))
        if win is not None:
            rnd = j.shift(win.rounds[op])
            if self.st.is_open(win.position, rnd) and self._closes(win, op, j):
                self.pass_turn(win, rnd, depth)
        if not hold:
            self.after(op, j, depth)
        if guard and win is not None and op == win.first:
            self._empty_if_past_end(win, j, depth - 1)

    def _closes(self, win, op: str, j: T.Iter) -> bool:
        """Whether ``op`` of iteration ``j`` is the last wgmma of its window's round that the program
        issues: it is the window's last, or each later wgmma of the round falls in an iteration before
        the first (a round only partly present in the prologue: FA3's order, Q·Kᵀ(0) with no P·V(-1)).
        A later wgmma past the last iteration is not decided here: the round stays open until the
        window's next round opens or the partition ends."""
        later = win.ops[win.ops.index(op) + 1:]
        return all(not j.base and j.off + win.rounds[op] - win.rounds[w] < 0 for w in later)

    # ---- tensor-core turns -----------------------------------------------------------------------
    def _in_chain(self, win, rnd: T.Iter) -> bool | str:
        """Whether round ``rnd`` of ``win`` lies on the token's path, which runs from position 0's
        round 0 to the last window whose first wgmma the program issues (round n - 1 + K at the last
        position whose first wgmma has the largest shift K). Every window takes each round on that
        path, with or without a wgmma in it, because the next window opens on its pass; past the path
        nobody waits. True, False, or a predicate on the trip count (a static round: short trips)."""
        wins = self.plan.windows
        k = max(w.rounds[w.first] for w in wins)
        last = max(w.position for w in wins if w.rounds[w.first] == k)
        limit = k - 1 if win.position <= last else k - 2  # on the path iff rnd <= n + limit
        if not rnd.base:
            if rnd.off < 0:
                return False
            return True if rnd.off - limit <= 1 else f"{rnd.off - limit} <= {self.n}"
        return rnd.off <= limit if rnd.base == self.n else True

    def _opens_partial(self, win, op: str, j: T.Iter) -> bool:
        """Whether ``op`` (not its window's first) opens its round: in the epilogue, where the window's
        earlier wgmmas of that round lie past the last iteration (round n - 1 + K of a window that
        wraps: its first wgmma's iteration n does not exist)."""
        if j.base != self.n:
            return False
        rnd = j.shift(win.rounds[op])
        earlier = win.ops[:win.ops.index(op)]
        return (not self.st.is_open(win.position, rnd) and self._in_chain(win, rnd) is True
                and all(j.off + win.rounds[op] - win.rounds[w] >= 0 for w in earlier))

    def open_turn(self, win, rnd: T.Iter, depth: int, why: str = "") -> None:
        """Wait for round ``rnd`` of ``win`` (a window holds one round at a time: an older one still
        open is passed first)."""
        for old in list(self.st.open_turns.get(win.position, [])):
            self.pass_turn(win, old, depth, "before the window's next round opens")
        order = (f"windows {[(w.group, list(w.ops)) for w in self.plan.windows]} take tensor-core turns in start "
                 "order")
        why = f"wait for group {win.group}'s turn: {why or order}"
        if self.plan.turn_kind == "named":
            bar, threads = self.plan.turn_barrier(win.position)
            self.add(T.named_barrier("sync", bar, threads, f"{why} (round {rnd.expr()}, named barrier)"), depth)
        else:
            self.add(T.turn_wait(win.position, rnd, f"{why} (round {rnd.expr()})"), depth)
        self.st.open_turns.setdefault(win.position, []).append(rnd)

    def empty_turn(self, win, rnd: T.Iter, depth: int, pred: str | None = None) -> None:
        """Take and pass round ``rnd`` of ``win`` with no wgmma in it: a round on the token's path that
        the prologue or epilogue has no iteration for (FA3's order with one window per wgmma: P·V(-1)
        in round 0, Q·Kᵀ(n) in round n)."""
        if pred:
            self.add(f"if {pred}:  # an empty turn that lies on the token's path", depth)
            depth += 1
        self.open_turn(win, rnd, depth, f"no wgmma of {', '.join(win.ops)} this time; the next window opens on "
                                         "its pass")
        self.pass_turn(win, rnd, depth, "an empty turn")

    def absent(self, op: str, j: T.Iter, depth: int) -> None:
        """``op`` of iteration ``j`` does not exist (before the first or past the last iteration): if it
        opens a window whose round lies on the token's path and has no wgmma at all, take the round
        empty. A round whose later wgmmas exist is opened by the first of them (``_opens_partial``)."""
        win = self.plan.window_of(op) if self.plan.kind(op) == "wgmma" else None
        if win is None or op != win.first:
            return
        rnd, chain, later = self._round_of(win, j)
        if chain is False or (j.base == self.n and any(x < 0 for x in later)):
            return
        self.empty_turn(win, rnd, depth, chain if isinstance(chain, str) else None)

    def _round_of(self, win, j: T.Iter) -> tuple[T.Iter, bool | str, list[int]]:
        """The round that ``win``'s first wgmma of iteration ``j`` opens, whether it is on the token's
        path (``_in_chain``), and the iteration offsets (from ``j``'s base) of the window's later wgmmas
        of that round."""
        rnd = j.shift(win.rounds[win.first])
        later = [j.off - (win.rounds[w] - win.rounds[win.first]) for w in win.ops[1:]]
        return rnd, self._in_chain(win, rnd), later

    def _empty_if_past_end(self, win, j: T.Iter, depth: int) -> None:
        """After a peeled step's guarded wgmma (a static iteration that short trip counts lack): the
        round it would open, taken empty when the iteration does not exist and the round is on the path."""
        rnd, chain, later = self._round_of(win, j)
        if chain is False or any(x == 0 for x in later):
            return  # off the path, or a later wgmma of the round (iteration 0) always exists
        preds = [f"{j.off} >= {self.n}"] + [f"{x} >= {self.n}" for x in later if x >= 1]
        self.empty_turn(win, rnd, depth, " and ".join(preds + ([chain] if isinstance(chain, str) else [])))

    def pass_turn(self, win, rnd: T.Iter, depth: int, when: str = "") -> None:
        """Pass round ``rnd`` of ``win`` on to the next position (exactly once per round opened)."""
        nxt = self.plan.windows[(win.position + 1) % len(self.plan.windows)]
        why = f"pass the turn to group {nxt.group}" + (f", {when}" if when else "")
        first = rnd.shift(-win.rounds[win.first])  # the iteration of the wgmma that opened the round
        pred = f"{first.expr()} >= 0" if first.base and first.min < 0 else None
        if self.plan.turn_kind == "named":
            bar, threads = self.plan.turn_barrier(nxt.position)
            if pred:
                self.add(f"if {pred}:  # a round before the first never opened: nothing to pass", depth)
                depth += 1
            self.add(T.named_barrier("arrive", bar, threads, f"{why} (round {rnd.expr()})"), depth)
        else:
            self.add(T.turn_pass(win.position, len(self.plan.windows), f"{why} (round {rnd.expr()})", pred), depth)
        rounds = self.st.open_turns.get(win.position, [])
        rounds[:] = [x for x in rounds if _key(x) != _key(rnd)]

    def after(self, op: str, j: T.Iter, depth: int) -> None:
        """The schedule's retire points that follow ``op``."""
        for w in self.plan.waits.values():
            if w.after == op and self.st.in_flight(w.op, j.shift(-w.lag)) is not None:
                lat = self.plan.problem.op(w.op).latency
                where = (f"behind the group's next wgmma, {w.after} (a wait(0) would hold the warps for its latency "
                         f"{lat})" if w.deferred else
                         f"{w.depth} later wgmma issue(s) of group {self.part.group} fall within its latency {lat}")
                self.wait(w.depth, f"retire {w.op}: {where} (start {self.plan.schedule.op(w.op).start}, "
                                   f"II {self.plan.schedule.ii})", depth)

    def wait(self, k: int, why: str, depth: int, release: bool = True) -> None:
        """``warpgroup_mma_wait(k)``: every wgmma but the k newest is retired; their values (and an
        RS wgmma's register A operand) become readable; slots whose last reader retired are freed."""
        done = self.st.inflight[:len(self.st.inflight) - k] if k else list(self.st.inflight)
        if not done:
            return
        self.st.inflight = self.st.inflight[len(done):]
        deps = []
        for op, j in done:
            deps.append(self.lookup(op, j, record=False) or self.plan.var(op))
            spec = self.plan.mmas[op]
            if spec.a_from == "regs":
                a = self.lookup(spec.a, j, record=False)
                if a is not None and a not in deps:
                    deps.append(a)
        self.add(T.wgmma_wait(deps, k, why), depth)
        self.st.tokens -= set(deps)
        if release:
            for op, j in done:
                self.release(op, j, depth)

    def release(self, op: str, j: T.Iter, depth: int) -> None:
        plan = self.plan
        spec = plan.mmas[op]
        chans = []
        for src in ([spec.a] if spec.a_from == "ring" else []) + [spec.b]:
            ch = plan.channel_of(src)
            if ch.cross and ch not in chans and plan.releases(self.part.group, ch.name, op):
                chans.append(ch)
        h = plan.handoffs.get(spec.a) if spec.a_from == "regs" else None
        hand = h if h is not None and op in h.operand else None
        if not chans and hand is None:
            return
        pred = f"{j.expr()} >= 0" if j.min < 0 else None
        if self.part.warps > 4:
            self.add(f"gl.thread_barrier()  # group {self.part.group} has {self.part.warps} warps: every warpgroup "
                     "retires its wgmma before the release", depth)
        for ch in chans:
            self.add(T.release(ch.name, j, ch.copies, pred, f"{op} of iteration {j.expr()} read {ch.name} (producer "
                                                            f"group {ch.producer}), the last reader group "
                                                            f"{self.part.group} issues"), depth)
        if hand is not None:
            self.add(T.release(hand.name, j, hand.copies, pred, f"{op} of iteration {j.expr()} has read {hand.op} "
                                                                f"from its slot (producer group {hand.group})"), depth)

    def op(self, op: str, j: T.Iter, depth: int, hold: bool = False) -> None:
        kind = self.plan.kind(op)
        if kind == "tma_load":
            self.load(op, j, depth)
        elif kind == "wgmma":
            self.mma(op, j, depth, hold)
        else:
            self.compute(op, j, depth)
            self.after(op, j, depth)

    def step(self, items: list[tuple[str, T.Iter]], depth: int, missing: list[tuple[str, T.Iter]] = ()) -> None:
        """One loop step (or peeled step): ``items`` in the partition's order; ``missing``: the ops of
        iterations the step lacks (a peeled step), whose tensor-core rounds may still need taking. The
        retires that a window's last wgmma triggers wait until the register ops deferred behind it
        (rule 12) that this step also runs are emitted."""
        here = {op for op, _ in items}
        held: dict[str, tuple[T.Iter, set[str]]] = {}
        lacking = dict(missing)
        for op, j in sorted([*items, *missing], key=lambda x: self.part.ops.index(x[0])):
            if op in lacking:
                self.absent(op, j, depth)
                continue
            followers = {x for x, v in self.plan.deferred.items() if v == op and x in here}
            self.op(op, j, depth, hold=bool(followers))
            if followers:
                held[op] = (j, followers)
            for v, (jv, rest) in list(held.items()):
                rest.discard(op)
                if not rest:
                    del held[v]
                    self.after(v, jv, depth)


def _next_top(st: _State, S: int) -> _State:
    """The state at the next loop step's top, in terms of its own ``t``."""
    return st.rebase(lambda j: T.Iter("t", j.off - 1, S) if j.base == "t" else j)


def _steady_state(b: _Body, entry: _State) -> _State:
    """The state at the top of a steady-state step: one step run from the loop's entry state
    (lines discarded), then its successor, which must repeat (the body is emitted once for all t)."""
    S = b.part.depth
    saved_lines, saved_st = b.lines, b.st
    try:
        state = entry
        for _ in range(2):
            b.lines, b.st = [], state.rebase(lambda j: j)
            b.step([(op, T.Iter("t", -b.part.stage[op], S)) for op in b.part.ops], 2)
            state = _next_top(b.st, S)
        return state
    finally:
        b.lines, b.st = saved_lines, saved_st


def _retire_before_loop(b: _Body, entry: _State, steady: _State) -> bool:
    """Retire, before the loop, the wgmmas the prologue leaves in flight that the steady state holds retired at its
    top. The loop body is emitted once for every trip from the periodic state, so it neither retires nor releases
    the slot of a wgmma only the prologue issued; left in flight it would enter the loop typed as in flight (Gluon
    rejects the mismatch at the back edge) and its ring slot would never be freed. Waiting here costs the first trip
    at most that wgmma's remaining latency."""
    kept = {(o, _key(j)) for o, j in steady.inflight}
    late = [i for i, (o, j) in enumerate(entry.inflight) if (o, _key(j)) not in kept]
    if not late:
        return False
    ops = ", ".join(sorted({entry.inflight[i][0] for i in late}))
    b.wait(len(entry.inflight) - (max(late) + 1), f"retire {ops} before the loop: the steady state's top holds it "
           "retired, so the loop body neither retires nor releases it", 1)
    return True


def _emit_partition(plan: Plan, part: Partition, depth: dict[str, int], check: bool = True) -> _Body:
    """Replay the partition's program: head (layouts, starting values), prologue, steady-state
    loop, epilogue, then the frame's writes of the results."""
    frame = plan.frame
    b = _Body(plan, part, depth)
    S = part.depth
    mine = [op for op in part.ops if op in plan.mmas]
    received = [h.op for h in plan.received(part.group)]
    finals = [f for f in plan.finals if f.reader_group == part.group]
    values = [plan.handoffs[o].value for o in [*received, *(o for o in part.ops if o in plan.handoffs)]]
    needs = dict.fromkeys(m for v in [*values, *(f.value for f in finals)] for m in v.needs if m not in mine)
    for op in [*mine, *needs]:  # its own accumulators', then those a value handed between groups is laid out by
        spec = plan.mmas[op]
        why = "wgmma accumulator" if op in mine else f"the layout of {op}'s accumulator (a handed-off value's)"
        b.add(f"{spec.acc}_layout: gl.constexpr = {T.acc_layout(part.warps, spec.acc_shape[1])}  # {why} over group "
              f"{part.group}'s {part.warps} warps")
    if plan.turn_kind == "named" and any(w.group == part.group for w in plan.windows):
        b.add(T.turn_token(part.warps))
        last = plan.windows[-1]
        if last.group == part.group:  # position 0's first round waits for the round before it: pass that now
            bar, threads = plan.turn_barrier(0)
            b.add(T.named_barrier("arrive", bar, threads, f"pass round -1 to group {plan.windows[0].group}: the "
                                  "first window of the first round opens on it"))
    for op in [*part.ops, *received]:
        spec = plan.mmas.get(op)
        if spec is not None and spec.acc_from is None:
            m, n = spec.acc_shape
            b.st.hist[op] = [T.Iter("", -1, 0)]
            b.add(f"{spec.acc} = gl.zeros(({m}, {n}), dtype=gl.float32, layout={spec.acc}_layout)  # {op} ignores its "
                  "accumulator (use_acc=False): each issue reuses the previous tile's registers")
            continue
        if plan.kind(op) == "tma_load" or not _read_before_first(plan, part, op):
            continue
        init = frame.init(op, spec)
        if init is None:
            raise CodegenError(f"codegen: {op} is read before iteration 0 but the frame gives no starting value")
        b.st.hist[op] = [T.Iter("", -1, 0)]
        b.add(f"{plan.var(op)} = {init}")
    _rounds_before_first(b)
    for p in range(S):
        b.add(f"# prologue step {p}: ops with stage offset <= {p} (stage peeling, depth {S})")
        b.step([(op, T.Iter("", p - part.stage[op], 0)) for op in part.ops if part.stage[op] <= p], 1,
               [(op, T.Iter("", p - part.stage[op], 0)) for op in part.ops if part.stage[op] > p])
    entry = b.st.rebase(lambda j: T.Iter("t", j.off - S, S) if not j.base else j)
    steady = _steady_state(b, entry)
    if _retire_before_loop(b, entry, steady):  # the loop now starts from the state the retire left
        entry = b.st.rebase(lambda j: T.Iter("t", j.off - S, S) if not j.base else j)
        steady = _steady_state(b, entry)
    for var in sorted(steady.tokens - entry.tokens):
        b.add(f"{var} = warpgroup_mma_init({var})  # this accumulator crosses the loop's back edge in flight")
    if entry.tokens - steady.tokens:
        raise CodegenError(f"codegen: group {part.group} enters its loop with {sorted(entry.tokens - steady.tokens)} "
                           "in flight, which the steady state has retired")
    missing = {(o, _key(j)) for o, j in entry.inflight} - {(o, _key(j)) for o, j in steady.inflight}
    b.st, steady_sig = steady.rebase(lambda j: j), steady.signature()
    b.assigned, b.top_reads = set(), set()
    b.add(f"for t in range({S}, {b.n}):  # steady state: every op, op of stage offset s works on iteration t - s")
    b.step([(op, T.Iter("t", -part.stage[op], S)) for op in part.ops], 2)
    if check and _next_top(b.st, S).signature() != steady_sig:
        raise CodegenError(f"codegen: group {part.group}'s steady state is not periodic")
    # what a step reads before rebinding it must be what the prologue left there
    differ = sorted((op, i) for op, i in b.top_reads
                    if [_key(j) for j in entry.hist.get(op, [])][i:i + 1] != [_key(steady.hist[op][i])])
    if check and (differ or missing):
        raise CodegenError(f"codegen: group {part.group}'s loop-carried values do not line up across the back edge "
                           f"({', '.join(f'{op} copy {i}' for op, i in differ) or f'in flight: {sorted(missing)}'})")
    b.assigned = set(part.ops)
    b.st = b.st.rebase(lambda j: T.Iter(b.n, j.off - 1, 1) if j.base == "t" else j)
    for e in range(S):
        need = e < S - 1
        depth_ = 1
        b.add(f"# epilogue step {e}: ops with stage offset > {e} drain the last iterations")
        if need:
            b.add(f"if {b.n} + {e} >= {S}:  # short trip counts: the prologue already ran these steps")
            depth_ = 2
        b.step([(op, T.Iter(b.n, e - part.stage[op], 1)) for op in part.ops if part.stage[op] > e], depth_,
               [(op, T.Iter(b.n, e - part.stage[op], 1)) for op in part.ops if part.stage[op] <= e])
    _rounds_past_the_end(b, S)
    for pos in sorted(b.st.open_turns):  # rounds whose later wgmmas lie past the last iteration
        for rnd in list(b.st.open_turns[pos]):
            b.pass_turn(plan.windows[pos], rnd, 1)
    b.wait(0, "frame: the epilogue reads the accumulators", 1, release=False)
    last = T.Iter(b.n, -1, 1)
    for f in plan.finals:
        if f.group == part.group:
            value = b.read(f.op, last, f"group {f.reader_group}'s write of its output", 1)
            b.add(f"{f.name}.index(0).store({value})  # hand the last {f.op} to group {f.reader_group}, whose output "
                  "reads it")
            b._sync(1, "every warp has stored its part before the value is published")
            b.add(f"mbarrier.arrive({f.name}_bar.index(0))  # {f.op} of the last iteration is in SMEM")
    loaded: dict[str, str] = {}
    for op in frame.outputs():
        if op in part.ops:
            def read(src: str, _distance: int, op: str = op) -> str:
                f = next((f for f in finals if f.op == src), None)
                if f is None:
                    return b.read(src, last, f"the frame's write of {op}", 1)
                if src not in loaded:
                    loaded[src] = f"{src}_last"
                    b.add(f"mbarrier.wait({f.name}_bar.index(0), 0)  # group {f.group} publishes its last {src}")
                    b.add(f"{src}_last = {f.name}.index(0).load({f.value.layout})  # {src} of the last iteration, "
                          f"from group {f.group}")
                return loaded[src]
            for line in frame.finish(op, plan.mmas[op], read):
                b.add(line)
    return b


def _rounds_past_the_end(b: _Body, stages: int) -> None:
    """Take empty the rounds on the token's path that come after everything the epilogue visits: the
    path runs to round n - 1 + K, K the largest shift of a window's first wgmma (``_in_chain``), but a
    window whose own shift is smaller reaches only round n - 1 + stages - stage[f] + rounds[f] through
    its iterations (Q·Kᵀ1 at shift 0 in a group of one stage, where P·V0 of another group has shift 2:
    its round n + 1 has no iteration to open it); they are taken last, in token order."""
    plan, part = b.plan, b.part
    late = []
    for w in plan.windows:
        if w.group != part.group:
            continue
        r = stages - part.stage[w.first] + w.rounds[w.first]
        while b._in_chain(w, T.Iter(b.n, r, 1)) is True:
            late.append((r, w.position))
            r += 1
    for r, pos in sorted(late):
        b.empty_turn(plan.windows[pos], T.Iter(b.n, r, 1), 1)


def _rounds_before_first(b: _Body) -> None:
    """Take empty the rounds on the token's path that come before anything the program visits: a
    window whose first wgmma f issues round i + rounds[f] for iteration i, in a group whose prologue
    starts at iteration -stage[f], never sees rounds 0 .. rounds[f] - stage[f] - 1 (P·V(i - 1) in
    round i of a group where P·V has the lowest stage); they are taken first, in token order."""
    plan, part = b.plan, b.part
    early = sorted((r, w.position) for w in plan.windows if w.group == part.group
                   for r in range(max(0, w.rounds[w.first] - part.stage[w.first])))
    for r, pos in early:
        win, rnd = plan.windows[pos], T.Iter("", r, 0)
        chain = b._in_chain(win, rnd)
        if chain is not False:
            b.empty_turn(win, rnd, 1, chain if isinstance(chain, str) else None)


def _read_before_first(plan: Plan, part: Partition, op: str) -> bool:
    """Whether iteration 0 of some op of the partition reads ``op`` of iteration -1 over a register
    edge (a recurrence, or an accumulator chained in place: ``make_plan`` checks each MMA's chain
    is an edge), so ``op`` needs a starting value."""
    return any(e.src == op and e.dst in part.ops and e.carrier == Carrier.REGISTERS and e.distance > 0
               for e in plan.problem.edges)


def _partition(plan: Plan, part: Partition, args: str) -> list[str]:
    sched = plan.schedule
    g = next(x for x in sched.groups if x.id == part.group)
    head = [
        "@gluon.jit",
        f"def partition_g{part.group}({args}):",
        f'{IND}"""Group {part.group} ({g.role}): {part.warps} warp(s), '
        f'{"no register budget" if part.regs is None else f"{part.regs} registers per thread"}; ops in issue order '
        f'{", ".join(part.ops)} (by offset{f" from {part.cut}" if part.cut else ""}); {part.depth} peeled stage(s)."""',
    ]
    # a first pass measures how many rotated copies each value needs; the second emits them
    probe = _emit_partition(plan, part, {op: 8 for op in [*part.ops, *(h.op for h in plan.received(part.group))]},
                            check=False)
    body = _emit_partition(plan, part, probe.used)
    if len(body.lines) == 0:
        body.add("pass")
    return head + body.lines


def _kernel(plan: Plan, name: str, args: list[str]) -> list[str]:
    frame = plan.frame
    lines = ["@gluon.jit", f"def {name}({', '.join(frame.kernel_params)}):"]
    for line in frame.prelude():
        lines.append(IND + line)
    for r in plan.rings.values():
        shape = [r.copies, *r.spec.block]
        lines.append(f"{IND}{r.op}_ring = gl.allocate_shared_memory({r.spec.dtype}, {shape}, {r.spec.desc}.layout)"
                     f"  # ring of {r.op}: {r.copies_from}")
    for sname, dtype, shape, layout, _ in frame.staging():
        lines.append(f"{IND}{sname} = gl.allocate_shared_memory({dtype}, {list(shape)}, {layout})  # frame: staging")
    for ch in plan.channels:
        rings = ", ".join(r.op for r in ch.rings)
        lines.append(f"{IND}{ch.name}_full = gl.allocate_shared_memory(gl.int64, [{ch.copies}, 1], "
                     f"mbarrier.MBarrierLayout())  # channel {ch.name} ({rings}) -> {', '.join(ch.readers)}")
        if ch.cross:
            lines.append(f"{IND}{ch.name}_empty = gl.allocate_shared_memory(gl.int64, [{ch.copies}, 1], "
                         f"mbarrier.MBarrierLayout())  # crosses groups {ch.producer} -> {list(ch.reader_groups)}")
        lines.append(f"{IND}for i in gl.static_range({ch.copies}):")
        lines.append(f"{IND * 2}mbarrier.init({ch.name}_full.index(i), count=1)  # one expect-tx per slot fill")
        if ch.cross:
            lines.append(f"{IND * 2}mbarrier.init({ch.name}_empty.index(i), count={len(ch.reader_groups)})"
                         f"  # one release per reader group")
    for h in plan.handoffs.values():
        v = h.value
        lines.append(f"{IND}{h.name} = gl.allocate_shared_memory({v.dtype}, {[h.copies, *v.shape]}, {v.smem_layout})"
                     f"  # register hand-off {h.op} (group {h.group}) -> {', '.join(h.readers)}: {h.copies_from}")
        lines.append(f"{IND}{h.name}_full = gl.allocate_shared_memory(gl.int64, [{h.copies}, 1], "
                     "mbarrier.MBarrierLayout())")
        lines.append(f"{IND}{h.name}_empty = gl.allocate_shared_memory(gl.int64, [{h.copies}, 1], "
                     "mbarrier.MBarrierLayout())")
        lines.append(f"{IND}for i in gl.static_range({h.copies}):")
        lines.append(f"{IND * 2}mbarrier.init({h.name}_full.index(i), count=1)  # the producer group publishes")
        lines.append(f"{IND * 2}mbarrier.init({h.name}_empty.index(i), count={len(h.reader_groups)})"
                     "  # one release per reader group")
    for f in plan.finals:
        v = f.value
        lines.append(f"{IND}{f.name} = gl.allocate_shared_memory({v.dtype}, {[1, *v.shape]}, {v.smem_layout})"
                     f"  # the last {f.op} (group {f.group}) for group {f.reader_group}'s output")
        lines.append(f"{IND}{f.name}_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())")
        lines.append(f"{IND}mbarrier.init({f.name}_bar.index(0), count=1)")
    if plan.turn_kind == "mbarrier":
        lines.append(f"{IND}turn = gl.allocate_shared_memory(gl.int64, [{len(plan.turns)}, 1], mbarrier.MBarrierLayout())"
                     f"  # tensor-core turns of groups {plan.turns} (disjoint TC windows in the schedule)")
        lines.append(f"{IND}for i in gl.static_range({len(plan.turns)}):")
        lines.append(f"{IND * 2}mbarrier.init(turn.index(i), count=1)  # the group before passes the turn")
    for line in frame.after_alloc():
        lines.append(IND + line)
    lines.append(f"{IND}args = ({', '.join(args)},)")
    if len(plan.partitions) == 1:
        lines.append(f"{IND}partition_g{plan.default.group}(*args)  # one group: no warp specialization")
    else:
        parts = ", ".join(f"(partition_g{p.group}, args)" for p in plan.partitions)
        warps = [p.warps for p in plan.workers]
        regs = [p.regs for p in plan.workers]
        lines.append(f"{IND}gl.warp_specialize([{parts}], {warps}, {regs})"
                     f"  # default: group {plan.default.group}; workers: groups {[p.group for p in plan.workers]} "
                     f"with their warps and register budgets")
    return lines


def emit_source(plan: Plan, schedule_name: str = "") -> str:
    """The whole generated module as text."""
    sched, frame = plan.schedule, plan.frame
    name = f"twill_{sched.program}_kernel"
    args = list(frame.kernel_params[:0])
    args += [p for p in frame.kernel_params if p.endswith("_desc")]
    args += [f"{r}_ring" for r in plan.rings]
    args += [s[0] for s in frame.staging()]
    for ch in plan.channels:
        args.append(f"{ch.name}_full")
        if ch.cross:
            args.append(f"{ch.name}_empty")
    for h in plan.handoffs.values():
        args += [h.name, f"{h.name}_full", f"{h.name}_empty"]
    for f in plan.finals:
        args += [f.name, f"{f.name}_bar"]
    if plan.turn_kind == "mbarrier":
        args.append("turn")
    args += list(frame.scalars())
    launch = {"num_warps": plan.default.warps}
    g = plan.grant
    groups = "; ".join(f"g{x.id} {x.warps}w {x.regs_per_thread or '-'}r [{' '.join(x.ops)}]" for x in sched.groups)
    out = [
        f'"""Generated by twill codegen from {schedule_name or "a schedule"} -- do not edit.',
        "",
        f"program {sched.program} {dict(sched.body.params)} on {sched.arch}; II {sched.ii} ({sched.status}); "
        f"stages {sched.stages}",
        f"groups: {groups}",
        f"rings: {', '.join(f'{r.op} x{r.copies}' for r in plan.rings.values())}; "
        f"channels: {', '.join(f'{c.name}=' + '+'.join(r.op for r in c.rings) for c in plan.channels)}",
        f"SMEM {plan.smem_bytes} B; launch num_warps={plan.default.warps}"
        + ("" if g is None else f"; compiler grant (AllocateWarpGroups): maxnreg {g.maxnreg}, default "
           f"{g.default}, workers {list(g.workers)}, {g.total_warps} warps"),
        '"""',
        "import triton",
        "from triton.experimental import gluon",
        "from triton.experimental.gluon import language as gl",
        "from triton.experimental.gluon.language.nvidia.hopper import (",
        "    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)",
        "from triton.experimental.gluon.nvidia.hopper import TensorDescriptor",
        "",
        f"SCHEDULE = {{'file': {schedule_name!r}, 'program': {sched.program!r}, 'arch': {sched.arch!r}, "
        f"'status': {sched.status!r}, 'ii': {sched.ii}, "
        f"'groups': {[(x.id, x.warps, x.regs_per_thread) for x in sched.groups]}, 'turns': {plan.turns}, "
        f"'turn_kind': {plan.turn_kind!r}}}",
        f"PARAMS = {dict(sched.body.params)!r}",
        f"STAGES = {sched.stages}",
        f"RINGS = {{{', '.join(f'{r.op!r}: {r.copies}' for r in plan.rings.values())}}}",
        f"LAUNCH = {launch!r}",
        f"KERNEL_NAME = {name!r}",
        "",
    ]
    arglist = ", ".join(args)
    for p in plan.partitions:
        out += ["", *_partition(plan, p, arglist), ""]
    out += ["", *_kernel(plan, name, args), "", ""]
    out += frame.host(name, launch)
    text = "\n".join(out) + "\n"
    check_turns(text, plan)  # the turn statements as emitted: every round opened is passed once, no deadlock
    return text
