"""Static check of the tensor-core turn protocol (rule 9) in an emitted module.

The check reads the generated source, not the emitter's state: for a few loop trip counts it runs
each partition function's control flow (peeled ``if`` guards, the steady ``for`` loop, the epilogue
guards) and collects the turn statements it would execute, in order: ``bar.sync``/``bar.arrive`` on
the named barriers (the default lowering) or ``mbarrier.wait``/``mbarrier.arrive`` on ``turn`` (the
mbarrier lowering), each with the round its comment names. Then:

* every window opens and passes the same rounds: each round a group waits for (opens) is passed on
  exactly once, after it was opened, and no round is passed that was not opened (the last position's
  round -1 pass before its prologue excepted, which opens position 0's first round on named barriers);
* every interleaving of the groups' turn statements is explored (named barriers count arrivals and
  have no phase; mbarriers complete one phase per arrival and a wait tests a parity): no state may
  be stuck (a deadlock), a named barrier's generation must be one ``bar.sync`` of its position's
  group and one ``bar.arrive`` of the group before it for the rounds that belong together (position
  0's round r opens on the last position's round r - 1), and an mbarrier wait for round r must be
  let through exactly by the passes up to that round.

``check_turns`` raises ``CodegenError`` naming the window, the round and the trip count.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from twill.codegen.plan import NAMED_BARRIERS, CodegenError, Plan

__all__ = ["TurnEvent", "executed", "turn_events", "check_turns", "trip_counts"]

_NAMED = re.compile(r'"bar\.(sync|arrive) (\d+), (\d+);')
_MB_WAIT = re.compile(r"^mbarrier\.wait\(turn\.index\((\d+)\), (.+)\)$")
_MB_PASS = re.compile(r"^mbarrier\.arrive\(turn\.index\((\d+)\)(?:, pred=(.+))?\)$")
_ROUND = re.compile(r"(?:\(|\bpass )round (.+?)(?:, named barrier\)|\)| to group)")  # "(round R" or "pass round R to group"
_IF = re.compile(r"^if (.+):$")
_FOR = re.compile(r"^for (\w+) in range\((.+)\):$")
_EXPR = re.compile(r"^[\w\s+\-*/%()<>=!&|^,]*$")


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """One executed turn statement: ``kind`` 'wait' (opens a round of ``position``) or 'pass' (passes
    a round on to ``position``), by ``group``, for ``round``; ``threads`` (named barrier count) or
    ``parity`` (mbarrier wait)."""

    group: int
    kind: str
    position: int
    round: int
    line: str
    threads: int = 0
    parity: int = 0


def _eval(expr: str, env: dict[str, int], where: str) -> int:
    if not _EXPR.match(expr):
        raise CodegenError(f"codegen: turn protocol: cannot evaluate {expr!r} ({where})")
    try:
        return eval(expr, {"__builtins__": {}}, dict(env))  # noqa: S307 - our own generated arithmetic
    except Exception as e:  # pragma: no cover - a malformed line is an emitter bug
        raise CodegenError(f"codegen: turn protocol: cannot evaluate {expr!r} ({where}): {e}") from e


def _function_lines(source: str, group: int) -> list[tuple[int, str, str]]:
    """(indent level, code, comment) of ``partition_g{group}``'s body lines."""
    lines = source.splitlines()
    head = next((i for i, x in enumerate(lines) if x.startswith(f"def partition_g{group}(")), None)
    if head is None:
        raise CodegenError(f"codegen: turn protocol: no function partition_g{group} in the source")
    out = []
    for line in lines[head + 1:]:
        if line and not line.startswith(" "):
            break
        if not line.strip():
            continue
        code, _, comment = line.strip().partition("  # ")
        out.append(((len(line) - len(line.lstrip(" "))) // 4, code.strip(), comment))
    return out


def _event(group: int, code: str, comment: str, env: dict[str, int], plan: Plan) -> TurnEvent | None:
    m = _NAMED.search(code)
    if m:
        op, bar, threads = m.group(1), int(m.group(2)), int(m.group(3))
        kind, position = ("wait" if op == "sync" else "pass"), NAMED_BARRIERS - 1 - bar
        extra = {"threads": threads}
    elif (m := _MB_WAIT.match(code)) is not None:
        kind, position = "wait", int(m.group(1))
        extra = {"parity": _eval(m.group(2), env, code)}
    elif (m := _MB_PASS.match(code)) is not None:
        if m.group(2) is not None and not _eval(m.group(2), env, code):
            return None
        kind, position, extra = "pass", int(m.group(1)), {}
    else:
        return None
    r = _ROUND.search(comment)
    if r is None:
        raise CodegenError(f"codegen: turn protocol: group {group}'s turn statement names no round: {code}")
    if not 0 <= position < len(plan.windows):
        raise CodegenError(f"codegen: turn protocol: group {group} uses turn position {position}; the schedule has "
                           f"{len(plan.windows)}")
    return TurnEvent(group, kind, position, _eval(r.group(1), env, comment), code, **extra)


def _run(lines: list[tuple[int, str, str]], group: int, i: int, level: int, env: dict[str, int], live: bool,
         out: list[tuple[str, str, dict[str, int]]]) -> int:
    """Execute the block of ``lines`` that starts at ``i`` (indent ``level``), appending each statement that runs
    as (code, comment, environment); returns the index after the block."""
    while i < len(lines) and lines[i][0] >= level:
        lvl, code, comment = lines[i]
        if lvl > level:
            raise CodegenError(f"codegen: turn protocol: unexpected indent in group {group}: {code}")
        m_if, m_for = _IF.match(code), _FOR.match(code)
        if m_if:
            i = _run(lines, group, i + 1, level + 1, env, live and bool(_eval(m_if.group(1), env, code)), out)
        elif m_for:
            end = i + 1
            while end < len(lines) and lines[end][0] > level:
                end += 1
            bounds = _eval(f"({m_for.group(2)},)", env, code) if live else (0,)
            for v in range(*bounds):
                _run(lines, group, i + 1, level + 1, {**env, m_for.group(1): v}, live, out)
            i = end
        else:
            if live:
                out.append((code, comment, env))
            i += 1
    return i


def executed(source: str, group: int, trip_count: str, n_iter: int) -> list[tuple[str, str, dict[str, int]]]:
    """The statements ``partition_g{group}`` of ``source`` executes for trip count ``n_iter``, in order, each as
    (code, comment, the loop variables' values): the control flow the emitter writes (peeled ``if`` guards, the
    steady ``for`` loop) run on the text, so a reader of the kernel (this check, a replay) sees what the GPU runs."""
    out: list[tuple[str, str, dict[str, int]]] = []
    _run(_function_lines(source, group), group, 0, 1, {trip_count: n_iter}, True, out)
    return out


def turn_events(source: str, plan: Plan, n_iter: int) -> dict[int, list[TurnEvent]]:
    """The turn statements each partition of ``source`` executes, in order, for trip count ``n_iter``."""
    out: dict[int, list[TurnEvent]] = {}
    for part in plan.partitions:
        events = [ev for code, comment, env in executed(source, part.group, plan.frame.trip_count, n_iter)
                  if (ev := _event(part.group, code, comment, env, plan)) is not None]
        if events:
            out[part.group] = events
    return out


def trip_counts(plan: Plan) -> list[int]:
    """Trip counts the check runs: 1 to 4, the deepest peeling S and S + 1, S + 2, 2S + 3."""
    s = max(p.depth for p in plan.partitions)
    return sorted({1, 2, 3, 4, s, s + 1, s + 2, 2 * s + 3} - {0})


def _window(plan: Plan, position: int) -> str:
    w = plan.windows[position]
    return f"window {position} (group {w.group}: {', '.join(w.ops)})"


def _opens(plan: Plan, position: int, rnd: int) -> int:
    """The round passed on to ``position`` that lets its round ``rnd`` open."""
    return rnd - 1 if position == 0 else rnd


def _check_rounds(plan: Plan, events: dict[int, list[TurnEvent]], n: int) -> None:
    m = len(plan.windows)
    for p, w in enumerate(plan.windows):
        before = plan.windows[p - 1].group
        for g, evs in events.items():
            for e in evs:
                if e.position != p:
                    continue
                want = w.group if e.kind == "wait" else before
                if g != want:
                    raise CodegenError(f"codegen: turn protocol (trip count {n}): group {g} {e.kind}s at turn "
                                       f"position {p}, which belongs to group {want} ({_window(plan, p)}): {e.line}")
                if plan.turn_kind == "named" and e.threads != plan.turn_barrier(p)[1]:
                    raise CodegenError(f"codegen: turn protocol: {e.line} counts {e.threads} threads; turn position {p} "
                                       f"needs {plan.turn_barrier(p)[1]}")
        opened = [e.round for e in events.get(w.group, []) if e.kind == "wait" and e.position == p]
        passed = [e.round for e in events.get(w.group, []) if e.kind == "pass" and e.position == (p + 1) % m]
        if plan.turn_kind == "named" and p == m - 1:
            if passed.count(-1) != 1:
                raise CodegenError(f"codegen: turn protocol (trip count {n}): {_window(plan, p)} passes round -1 "
                                   f"{passed.count(-1)} time(s); the first round of {_window(plan, 0)} opens on it "
                                   "(once, before the prologue)")
            passed.remove(-1)
        held: set[int] = set()
        for e in events.get(w.group, []):  # in program order: a round is passed after its window opened it
            if e.kind == "wait" and e.position == p:
                held.add(e.round)
            elif e.kind == "pass" and e.position == (p + 1) % m and e.round in opened and e.round not in held:
                raise CodegenError(f"codegen: turn protocol (trip count {n}): {_window(plan, p)} passes round "
                                   f"{e.round} before it opens it: {e.line}")
        for r in sorted(set(opened) | set(passed)):
            if opened.count(r) > 1:
                raise CodegenError(f"codegen: turn protocol (trip count {n}): {_window(plan, p)} opens round {r} "
                                   f"{opened.count(r)} times")
            if passed.count(r) != opened.count(r):
                what = (f"opens round {r} and passes it {passed.count(r)} time(s)" if r in opened else
                        f"passes round {r} {passed.count(r)} time(s) but never opens it")
                raise CodegenError(f"codegen: turn protocol (trip count {n}): {_window(plan, p)} {what}; every "
                                   "round a window opens is passed on exactly once")


def _explore(plan: Plan, events: dict[int, list[TurnEvent]], n: int) -> None:
    """Every interleaving of the groups' turn statements (breadth first over the distinct states)."""
    groups = sorted(events)
    evs = [events[g] for g in groups]
    m = len(plan.windows)
    named = plan.turn_kind == "named"
    passes_into = {p: sorted(e.round for es in evs for e in es if e.kind == "pass" and e.position == p)
                   for p in range(m)}
    # state: (pcs, waiting flags, per position: named -> contributions of the open generation,
    #                                            mbarrier -> rounds passed so far)
    start = (tuple(0 for _ in groups), tuple(False for _ in groups), tuple(() for _ in range(m)))
    seen = {start}
    todo = deque([start])

    def fail(what: str) -> None:
        raise CodegenError(f"codegen: turn protocol (trip count {n}): {what}")

    while todo:
        pcs, waiting, bars = todo.popleft()
        moved = False
        for i, g in enumerate(groups):
            if pcs[i] >= len(evs[i]) or waiting[i]:
                continue
            e = evs[i][pcs[i]]
            p = e.position
            npcs, nwait, nbars = list(pcs), list(waiting), list(bars)
            if named:
                gen = bars[p]
                if any(c[0] == g for c in gen):
                    other = next(c for c in gen if c[0] == g)
                    fail(f"group {g} reaches named barrier {NAMED_BARRIERS - 1 - p} twice in one generation "
                         f"({other[1]} round {other[2]}, then {e.kind} round {e.round}; {_window(plan, p)}): the "
                         "second arrival can complete the barrier without the other group")
                gen = gen + ((g, e.kind, e.round),)
                if e.kind == "wait":
                    nwait[i] = True
                else:
                    npcs[i] += 1
                if len(gen) == 2:
                    wait = next((c for c in gen if c[1] == "wait"), None)
                    give = next((c for c in gen if c[1] == "pass"), None)
                    if wait is None or give is None:
                        fail(f"named barrier {NAMED_BARRIERS - 1 - p} completes without a bar.sync and a bar.arrive: "
                             f"{gen}")
                    if give[2] != _opens(plan, p, wait[2]):
                        fail(f"{_window(plan, p)} round {wait[2]} opens on the pass of round {give[2]} (it needs "
                             f"round {_opens(plan, p, wait[2])})")
                    k = groups.index(wait[0])
                    nwait[k], npcs[k] = False, npcs[k] + 1
                    gen = ()
                nbars[p] = gen
            else:
                if e.kind == "pass":
                    nbars[p] = bars[p] + (e.round,)
                    npcs[i] += 1
                else:
                    if (len(bars[p]) & 1) == e.parity:
                        continue  # blocked: the phase of that parity has not completed
                    need = [r for r in passes_into[p] if r <= _opens(plan, p, e.round)]
                    if sorted(bars[p]) != need:
                        fail(f"{_window(plan, p)} round {e.round} opens after the passes of rounds {sorted(bars[p])} "
                             f"(it needs exactly {need}): {e.line}")
                    npcs[i] += 1
            moved = True
            state = (tuple(npcs), tuple(nwait), tuple(nbars))
            if state not in seen:
                seen.add(state)
                todo.append(state)
        if not moved and any(pc < len(es) for pc, es in zip(pcs, evs, strict=True)):
            stuck = [f"group {g} at {evs[i][pcs[i]].line.split('(', 1)[0]} for round {evs[i][pcs[i]].round} of "
                     f"{_window(plan, evs[i][pcs[i]].position)}"
                     for i, g in enumerate(groups) if pcs[i] < len(evs[i])]
            fail("deadlock: " + "; ".join(stuck) + " waits forever")


def check_turns(source: str, plan: Plan, trips: list[int] | None = None) -> None:
    """Raise ``CodegenError`` if the emitted turn statements of ``source`` break the protocol for any of
    ``trips`` (default ``trip_counts(plan)``)."""
    if not plan.turn_kind or not plan.windows:
        return
    for n in trips or trip_counts(plan):
        events = turn_events(source, plan, n)
        _check_rounds(plan, events, n)
        _explore(plan, events, n)
