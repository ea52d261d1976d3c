"""The design space of a sweep: each program parameter with the values to try.

``-p block_n=64,128 -p subtiles=1,2`` names some parameters with lists of values; every other
parameter keeps its default. Values are typed like the program's defaults (through
``parse_params``, the same parser ``twill solve -p`` uses), so any program with ``PARAMETERS``
can be swept, whatever its frontend. Points come out in a fixed order (the program's parameter
order, values in the order given), so ranking ties break the same way on every run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from twill.errors import ProgramError
from twill.frontend.programs import parse_params

__all__ = ["Space", "parse_space"]


@dataclass(frozen=True, slots=True)
class Space:
    """Every parameter of a program with the values a sweep tries (one value when not swept)."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    given: tuple[str, ...] = ()  # the parameters named on the command line, in their order

    @property
    def shown(self) -> tuple[str, ...]:
        """The parameters a label needs: the varied ones, or for a single point those given."""
        return self.varied or self.given

    @property
    def varied(self) -> tuple[str, ...]:
        """The parameters with more than one value: the ones a table or plot needs to show."""
        return tuple(n for n, vs in zip(self.names, self.values, strict=True) if len(vs) > 1)

    @property
    def size(self) -> int:
        out = 1
        for vs in self.values:
            out *= len(vs)
        return out

    def points(self) -> list[dict[str, Any]]:
        """Every point of the grid, in the space's fixed order."""
        return [dict(zip(self.names, combo, strict=True)) for combo in itertools.product(*self.values)]

    def choices(self) -> dict[str, tuple[Any, ...]]:
        return dict(zip(self.names, self.values, strict=True))


def parse_space(pairs: list[str], defaults: dict[str, Any]) -> Space:
    """Turn ``["block_n=64,128", "subtiles=2"]`` into a ``Space`` over the program's parameters.

    Raises ``ProgramError`` (one line, the CLI exits 2) for a pair without ``=``, an unknown
    parameter, an empty list or item, a value of the wrong type, or a name or value given twice.

    Examples
    --------
    >>> s = parse_space(["b=64,128", "a=2"], {"a": 1, "b": 128, "c": "x"})
    >>> s.varied, s.size
    (('b',), 2)
    >>> s.points()[0]
    {'a': 2, 'b': 64, 'c': 'x'}
    """
    chosen: dict[str, tuple[Any, ...]] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep:
            raise ProgramError(f"parameter {pair!r}: expected NAME=V1,V2,...")
        if name in chosen:
            raise ProgramError(f"parameter {name!r}: given twice; list all its values in one -p {name}=V1,V2")
        items = raw.split(",")
        if any(not item.strip() for item in items):
            raise ProgramError(f"parameter {name!r}: empty value in {raw!r}; expected a comma-separated list")
        values = tuple(parse_params([f"{name}={item.strip()}"], defaults)[name] for item in items)
        repeated = sorted({repr(v) for v in values if values.count(v) > 1})
        if repeated:
            raise ProgramError(f"parameter {name!r}: value {repeated[0]} is listed twice")
        chosen[name] = values
    names = tuple(defaults)
    return Space(names, tuple(chosen.get(n, (defaults[n],)) for n in names), tuple(chosen))
