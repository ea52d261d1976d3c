"""Where a sweep's solves run: in this process, in a local process pool, or on a Dask cluster.

A ``Task`` carries everything a solve needs as plain data (the body's JSON, the arch by name or
TOML text, the ``SolveOptions``), so a worker needs neither the program file nor this process's
state, only twill installed. ``solve_task`` returns a JSON-able outcome, which the caller caches.
Engines yield outcomes as they finish (any order); the sweep sorts them afterwards, so the order
of completion never shows in its results.

Dask rather than Ray (docs/cli.md says more): Dask's ``distributed`` is pure Python from PyPI,
a ``LocalCluster`` starts in about a second with no daemon or object store, and ``Client.submit``
behaves like ``concurrent.futures``; the same code reaches an SSH, Kubernetes or SLURM cluster
through its scheduler address.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from twill.arch.model import Arch
from twill.arch.registry import get_arch
from twill.arch.toml import arch_from_dict
from twill.body_json import body_from_document
from twill.bounds import bound_and_reason
from twill.errors import InfeasibleError, TwillError
from twill.options import SolveOptions
from twill.problem import build_problem
from twill.solver import solve

__all__ = ["ArchRef", "Task", "solve_task", "Engine", "InlineEngine", "PoolEngine", "DaskEngine", "make_engine"]


@dataclass(frozen=True, slots=True)
class ArchRef:
    """An arch a worker can rebuild: a registry name, or the TOML text of a file arch (a cluster
    worker may not see this machine's files)."""

    name: str
    toml: str | None = None
    path: str | None = None

    @classmethod
    def of(cls, arch: Arch) -> ArchRef:
        if arch.origin == "file" and arch.path is not None:
            return cls(arch.name, Path(arch.path).read_text(encoding="utf-8"), str(arch.path))
        return cls(arch.name)

    def load(self) -> Arch:
        if self.toml is None:
            return get_arch(self.name)
        return arch_from_dict(tomllib.loads(self.toml), self.path or self.name, path=Path(self.path or self.name),
                              origin="file")


@dataclass(frozen=True, slots=True)
class Task:
    """One point to solve: its cache key, the body as ``twill.body/1`` JSON, the arch, the options."""

    key: str
    body: dict[str, Any]
    arch: ArchRef
    options: SolveOptions


def solve_task(task: Task) -> tuple[str, dict[str, Any]]:
    """Solve one point; return ``(key, outcome)``, where outcome is plain JSON.

    Every answer is an outcome, never an exception: ``optimal``/``feasible`` with the schedule,
    ``timeout`` (no schedule within the time limit, with the proven bound), ``infeasible``
    (proven), ``invalid`` (the graph and arch disagree), or ``error`` (an internal error, with its
    message). One bad point must not end a sweep.
    """
    began = time.monotonic()
    out: dict[str, Any] = {"status": "invalid", "schedule": None, "bound": None, "static_bound": None,
                           "binds": "", "message": ""}
    try:
        arch = task.arch.load()
        problem = build_problem(body_from_document(task.body, "sweep task"), arch)
        out["static_bound"], out["binds"] = bound_and_reason(problem, task.options)
        sched = solve(problem, task.options)
        out.update(status=sched.status, schedule=sched.to_dict(), bound=sched.ii_lower_bound)
    except InfeasibleError as err:
        timed_out = err.reason == "time limit"
        # the reason alone: the table already says which program and arch
        out.update(status="timeout" if timed_out else "infeasible", bound=err.proven_lb,
                   message=str(err).split(": infeasible: ", 1)[-1])
    except TwillError as err:
        out.update(status="invalid", message=str(err))
    except Exception as err:  # a solver bug on one point must not end a sweep of many; it is not cached
        out.update(status="error", message=f"internal error: {type(err).__name__}: {' '.join(str(err).split())[:300]}")
    out["seconds"] = round(time.monotonic() - began, 3)
    return task.key, out


class Engine(Protocol):
    """Runs tasks and yields ``(key, outcome)`` pairs as they finish; a context manager that
    stops every running solve when the block is left early (Ctrl-C)."""

    workers: int
    name: str

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def __enter__(self) -> Engine: ...

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        ...


class InlineEngine:
    """Solves one after another in this process: the library's default, no start-up cost.

    Not for interactive runs: CP-SAT catches Ctrl-C during a solve and ends that search as at a
    time limit, so Python never sees the interrupt and a cut-short answer would be cached. The
    CLI therefore solves in a pool even with ``-j 1``.
    """

    workers = 1
    name = "this process"

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[str, dict[str, Any]]]:
        for task in tasks:
            yield solve_task(task)

    def __enter__(self) -> InlineEngine:
        return self

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        return None


def _leave_interrupts_to_parent() -> None:
    """Pool workers leave their own process group, so a terminal's Ctrl-C reaches only the parent,
    which terminates them; otherwise CP-SAT in a worker would catch it and return a cut-short
    answer, and every worker would print a traceback."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class PoolEngine:
    """``-j N``: a pool of N processes on this machine (spawned: CP-SAT's threads and fork do not mix)."""

    def __init__(self, jobs: int) -> None:
        self.workers = jobs
        self.name = f"a pool of {jobs} process{'es' if jobs > 1 else ''}"
        self._pool: Any = None

    def __enter__(self) -> PoolEngine:
        self._pool = multiprocessing.get_context("spawn").Pool(self.workers, initializer=_leave_interrupts_to_parent)
        return self

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self._pool.imap_unordered(solve_task, tasks)

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        if kind is None:
            self._pool.close()
        else:
            self._pool.terminate()  # an interrupted sweep stops its solves now; the cache keeps what finished
        self._pool.join()


class DaskEngine:
    """A Dask cluster: an existing scheduler's address, or a ``LocalCluster`` of ``jobs``
    single-threaded worker processes started here (``--cluster local``)."""

    def __init__(self, address: str | None, jobs: int) -> None:
        self.address, self.workers = address, jobs
        self.name = f"the Dask scheduler at {address}" if address else f"a local Dask cluster of {jobs} workers"
        self._client: Any = None
        self._cluster: Any = None

    def __enter__(self) -> DaskEngine:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as err:
            raise TwillError("--cluster needs Dask: pip install 'twill[cluster]'") from err
        if self.address:
            self._client = Client(self.address)
            self.workers = max(1, sum(self._client.nthreads().values()))  # for the time-left estimate
        else:
            import logging

            self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                         dashboard_address=None, silence_logs=logging.ERROR)
            self._client = Client(self._cluster)
        return self

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[str, dict[str, Any]]]:
        from dask.distributed import as_completed

        futures = self._client.map(solve_task, list(tasks), pure=False)
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            self._client.cancel([f for f in futures if not f.done()])

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_engine(jobs: int, cluster: str | None = None) -> PoolEngine | DaskEngine:
    """The engine the CLI's ``-j`` and ``--cluster`` ask for (``cluster="local"`` starts one here):
    always worker processes, so that Ctrl-C stops a sweep (``InlineEngine`` says why)."""
    if jobs < 1:
        raise TwillError(f"-j {jobs}: the number of parallel solves must be at least 1")
    if cluster is not None:
        return DaskEngine(None if cluster == "local" else cluster, jobs)
    return PoolEngine(jobs)
