"""Read the text form of an MLIR module (Triton's TTGIR) into a small tree of ops, without MLIR.

Stage 0 of the Triton front end (docs/frontend.md): ``twill.frontend.ttgir`` maps this tree to a
``LoopBody``. What is kept is what the mapping needs: each op's name, results, operands (SSA
names, in order), result types, regions with their block arguments, and the source location its
``loc(...)`` resolves to. The reader handles MLIR's pretty form as Triton prints it (3.6 and 3.9):
``%a:3`` multi-results (used as ``%a#1``), generic ops (``"tt.reduce"(...) ({...})``), nested
regions (``scf.for``, ``scf.if`` / ``else``), type and location aliases, and MLIR_ENABLE_DUMP
streams holding one module per pass. Malformed text raises ``GraphError`` with its line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from twill.errors import GraphError

__all__ = ["MlirOp", "Module", "TensorType", "parse_module", "split_dump", "parse_type", "DumpModule"]

_HEADER = re.compile(r"^// -----// IR Dump Before (\w+)\b.*\('builtin\.module' operation\)")
_RESULTS = re.compile(r"^((?:%[\w$.-]+(?::\d+)?)(?:\s*,\s*%[\w$.-]+(?::\d+)?)*)\s*=\s*(.*)$")
_VALUE = re.compile(r"%[\w$.-]+(?:#\d+)?")
_FILE_LOC = re.compile(r'"([^"]+)":(\d+):(\d+)')
_LOC_REF = re.compile(r"#loc\d*")
_ALIAS = re.compile(r"^(#[\w$.-]+)\s*=\s*(.*)$")
_OPEN, _CLOSE = "([{<", ")]}>"
MAX_LINES = 200_000  # a pre-pipeline module has a few hundred lines; a dump stream holds ~50 of them
MAX_DEPTH = 64
MAX_RESULTS = 1024  # results of one op (%x:N); Triton's loops carry a handful
MAX_DIGITS = 12  # a dimension or constant longer than this is not a tile size


@dataclass(frozen=True, slots=True)
class TensorType:
    """A shaped type: ``tensor<128x64xf16, #enc>``, ``!ttg.memdesc<...>``, ``!tt.tensordesc<...>``."""

    kind: str  # "tensor", "memdesc", "tensordesc", "scalar", "token" or "other"
    shape: tuple[int, ...]
    element: str  # "f16", "f32", "i1", "!tt.ptr<f16>", ...
    encoding: str = ""

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(slots=True)
class MlirOp:
    """One op of the module: enough of it to build a dependence graph."""

    name: str
    results: tuple[str, ...]
    operands: tuple[str, ...]
    result_types: tuple[str, ...]
    text: str  # the op's own text without regions and locations (for attributes and messages)
    line: int  # 1-based line in the text it was read from
    loc: str = ""  # "kernels.py:27", or "" when the text carries no location
    regions: list[list[MlirOp]] = field(default_factory=list)
    region_args: list[tuple[str, ...]] = field(default_factory=list)
    arg_types: dict[str, str] = field(default_factory=dict)  # block-argument types (scf.for iter_args, func args)

    def walk(self):
        """This op and every op nested in its regions, in text order."""
        yield self
        for region in self.regions:
            for op in region:
                yield from op.walk()

    @property
    def where(self) -> str:
        """How an error message names this op: its source line if known, else the TTGIR line."""
        return self.loc or f"TTGIR line {self.line}"


@dataclass(slots=True)
class Module:
    ops: list[MlirOp]  # top-level ops (normally one tt.func)
    aliases: dict[str, str]  # "#mma" -> its definition, for encodings

    def functions(self) -> list[MlirOp]:
        return [op for op in self.ops if op.name in ("tt.func", "func.func")]


@dataclass(frozen=True, slots=True)
class DumpModule:
    """One module of an MLIR_ENABLE_DUMP stream and the pass it was printed before."""

    before_pass: str
    text: str
    first_line: int


def split_dump(text: str) -> list[DumpModule]:
    """The whole-module snapshots of a dump stream, in order (function-scope snapshots are skipped)."""
    out: list[DumpModule] = []
    current: list[str] | None = None
    name, start = "", 0
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("// -----//"):
            if current is not None:
                out.append(DumpModule(name, "\n".join(current), start))
            m = _HEADER.match(line)
            current, name, start = ([], m.group(1), i + 1) if m else (None, "", 0)
        elif current is not None:
            current.append(line)
    if current is not None:
        out.append(DumpModule(name, "\n".join(current), start))
    return out


def _strip_locs(line: str) -> tuple[str, str]:
    """Remove every ``loc(...)`` group; return the text and the last top-level location."""
    out, last, i = [], "", 0
    while True:
        j = line.find("loc(", i)
        if j < 0 or (j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_.#")):
            if j < 0:
                out.append(line[i:])
                break
            out.append(line[i:j + 4])
            i = j + 4
            continue
        out.append(line[i:j])
        depth, k = 0, j + 3
        while k < len(line):
            if line[k] == "(":
                depth += 1
            elif line[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        last = line[j + 4:k]
        i = k + 1
    return "".join(out).rstrip(), last


def _top_level(text: str, sep: str) -> list[int]:
    """Positions of ``sep`` outside brackets and quotes."""
    hits, depth, quoted, i = [], 0, False, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            quoted = not quoted
        elif not quoted:
            if c in _OPEN and not (c == "<" and i > 0 and text[i - 1] == "-"):
                depth += 1
            elif c in _CLOSE and not (c == ">" and i > 0 and text[i - 1] == "-"):
                depth = max(0, depth - 1)
            elif depth == 0 and text.startswith(sep, i):
                hits.append(i)
                i += len(sep)
                continue
        i += 1
    return hits


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, last = [], 0
    for pos in _top_level(text, sep):
        parts.append(text[last:pos])
        last = pos + len(sep)
    parts.append(text[last:])
    return [p.strip() for p in parts if p.strip()]


def parse_type(text: str, aliases: dict[str, str] | None = None) -> TensorType:
    """A type's kind, shape, element type and layout encoding (aliases resolved one level)."""
    t = text.strip()
    if t == "!ttg.async.token":
        return TensorType("token", (), "")
    for prefix, kind in (("tensor<", "tensor"), ("!ttg.memdesc<", "memdesc"), ("!tt.tensordesc<", "tensordesc")):
        if t.startswith(prefix) and t.endswith(">"):
            inner = t[len(prefix):-1].strip()
            if kind == "tensordesc" and inner.startswith("tensor<"):  # 3.6 spells !tt.tensordesc<tensor<...>>
                return TensorType("tensordesc", *_shape_parts(_split_top(inner[len("tensor<"):-1]), aliases))
            return TensorType(kind, *_shape_parts(_split_top(inner), aliases))
    if re.fullmatch(r"(i\d+|f\d+|bf16|index|f8E\w+|tf32|!tt\.ptr<.*>)", t):
        return TensorType("scalar", (), t)
    return TensorType("other", (), t)


def _shape_parts(parts: list[str], aliases: dict[str, str] | None) -> tuple[tuple[int, ...], str, str]:
    m = re.match(r"^((?:\d+x)*)(.*)$", parts[0] if parts else "")
    raw = [d for d in m.group(1).split("x") if d] if m else []
    if any(len(d) > MAX_DIGITS for d in raw):
        raise GraphError(f"TTGIR: a tensor dimension in {parts[0][:40]!r} is too large to be a tile size")
    dims = tuple(int(d) for d in raw)
    element = m.group(2) if m else ""
    encoding = parts[1] if len(parts) > 1 else ""
    if aliases and encoding in aliases:
        encoding = aliases[encoding]
    return dims, element, encoding


def _result_names(spec: str) -> tuple[str, ...]:
    names: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        base, _, count = part.partition(":")
        if count and (len(count) > 4 or int(count) > MAX_RESULTS):
            raise GraphError(f"TTGIR: {part!r} declares more than {MAX_RESULTS} results")
        if count:
            names.extend(f"{base}#{i}" for i in range(int(count)))
        else:
            names.append(base)
    return tuple(names)


class _Reader:
    """A recursive reader over the lines of one module."""

    def __init__(self, text: str, first_line: int) -> None:
        self.lines = text.splitlines()
        if len(self.lines) > MAX_LINES:
            raise GraphError(f"TTGIR: {len(self.lines)} lines is above the limit {MAX_LINES}; give one module")
        self.first = first_line
        self.i = 0
        self.aliases: dict[str, str] = {}
        self.locs: dict[str, str] = {}
        for raw in self.lines:  # Triton prints most location aliases after the module: read them first
            if raw.startswith("#loc"):
                alias = _ALIAS.match(raw.strip())
                if alias:
                    self.locs[alias.group(1)] = alias.group(2)

    def lineno(self) -> int:
        return self.first + self.i

    def read_module(self) -> Module:
        ops: list[MlirOp] = []
        while self.i < len(self.lines):
            raw = self.lines[self.i].strip()
            if not raw or raw.startswith("//"):
                self.i += 1
                continue
            alias = _ALIAS.match(raw)
            if alias and raw.startswith("#"):
                key, value = alias.groups()
                (self.locs if value.startswith("loc(") else self.aliases)[key] = value
                self.i += 1
                continue
            if raw.startswith("module"):
                self.i += 1
                ops.extend(self.read_block(depth=1)[0])
                continue
            if raw.startswith("}"):
                self.i += 1
                continue
            raise GraphError(f"TTGIR line {self.lineno()}: expected 'module', an alias or a comment, got "
                             f"{raw[:60]!r}")
        return Module(ops, self.aliases)

    def read_block(self, depth: int) -> tuple[list[MlirOp], str]:
        """Ops up to the closing brace of this region; returns them and the closing line."""
        if depth > MAX_DEPTH:
            raise GraphError(f"TTGIR line {self.lineno()}: regions nest deeper than {MAX_DEPTH}")
        ops: list[MlirOp] = []
        while self.i < len(self.lines):
            raw = self.lines[self.i].strip()
            text, loc = _strip_locs(raw)
            if text.startswith("^"):  # a block label with its arguments (tt.reduce's combiner)
                self._block_args = _block_args(text)
                self.i += 1
                continue
            if not text or text.startswith("//"):
                self.i += 1
                continue
            if text.startswith("}"):
                self.i += 1
                self._closing_loc = loc
                return ops, text
            ops.append(self.read_op(text, loc, depth))
        raise GraphError(f"TTGIR line {self.lineno()}: the text ends inside a region (a '}}' is missing)")

    def read_op(self, text: str, loc: str, depth: int) -> MlirOp:
        line = self.lineno()
        self.i += 1
        results: tuple[str, ...] = ()
        m = _RESULTS.match(text)
        body = text
        if m:
            results, body = _result_names(m.group(1)), m.group(2)
        name_match = re.match(r'^"([\w.]+)"|^([\w.]+)', body)
        if not name_match:
            raise GraphError(f"TTGIR line {line}: cannot read an op name in {body[:60]!r}")
        name = name_match.group(1) or name_match.group(2)
        op = MlirOp(name=name, results=results, operands=(), result_types=(), text=body, line=line,
                    loc=self._resolve_loc(loc))
        header = body
        if body.endswith("{") and not body.endswith("{}"):
            header = body[:-1].rstrip()
            if header.endswith("({"):
                header = header[:-2].rstrip()
            elif header.endswith("("):
                header = header[:-1].rstrip()
            tail = self._read_regions(op, depth)
            header = f"{header} {tail}"
            if not op.loc:  # a generic op prints its location after its regions
                op.loc = self._resolve_loc(self._closing_loc)
        op.text = header
        _fill_signature(op, header)
        return op

    def _read_regions(self, op: MlirOp, depth: int) -> str:
        """Read region after region (``} else {``, ``}, {``); return the text after the last brace."""
        while True:
            self._block_args = ()
            ops, closing = self.read_block(depth + 1)
            op.regions.append(ops)
            op.region_args.append(self._block_args)
            rest = closing[1:].strip()
            if rest.startswith(")"):
                rest = rest[1:].strip()
            if rest.endswith("{") and ("else" in rest or rest.startswith(",")):
                continue
            return rest

    def _resolve_loc(self, loc: str) -> str:
        """The source line of a location: the user's file over Triton's own (a call site of
        ``tl.max`` resolves to the kernel line that calls it, not to triton/language/standard.py)."""
        found = self._file_locs(loc, 0)
        user = [f for f in found if "/triton/language/" not in f[0]]
        best = (user or found or [("", "")])[0]
        return f"{best[0].rsplit('/', 1)[-1]}:{best[1]}" if best[0] else ""

    def _file_locs(self, loc: str, depth: int) -> list[tuple[str, str]]:
        if depth > 8:
            return []
        out: list[tuple[str, str]] = []
        for piece in re.split(r"(#loc\d*)", loc):
            if piece.startswith("#loc"):
                target = self.locs.get(piece)
                if target:
                    out.extend(self._file_locs(target[4:-1], depth + 1))
            else:
                out.extend((m.group(1), m.group(2)) for m in _FILE_LOC.finditer(piece))
        return out

    _block_args: tuple[str, ...] = ()
    _closing_loc: str = ""


def _block_args(text: str) -> tuple[str, ...]:
    inside = text[text.find("(") + 1:text.rfind(")")] if "(" in text else ""
    return tuple(part.split(":")[0].strip() for part in _split_top(inside))


def _fill_signature(op: MlirOp, header: str) -> None:
    """Operands, result types and block-argument types from the op's header text."""
    if op.name in ("tt.func", "func.func"):
        inside = header[header.find("(") + 1:]
        args = _split_top(inside[:_matching(inside)])
        op.region_args = [tuple(a.split(":")[0].strip() for a in args)] if op.regions else []
        op.arg_types = {a.split(":")[0].strip(): a.split(":", 1)[1].strip() for a in args if ":" in a}
        return
    if op.name == "scf.for":
        _fill_for(op, header)
        return
    colons = _top_level(header, " : ")
    operand_text = header[:colons[0]] if colons else header
    signature = header[colons[0] + 3:] if colons else ""
    op.operands = tuple(v for v in _VALUE.findall(operand_text) if v not in op.results)
    arrows = _top_level(signature, "->")
    if arrows:
        result_text = signature[arrows[-1] + 2:].strip()
    elif _top_level(signature, " to "):
        result_text = signature[_top_level(signature, " to ")[-1] + 4:]
    else:
        parts = _split_top(signature)
        result_text = parts[-1] if parts else ""
    result_text = _strip_attr_dict(result_text.strip())
    if result_text.startswith("(") and result_text.endswith(")"):
        result_text = result_text[1:-1]
    types = tuple(_split_top(result_text)) if result_text else ()
    op.result_types = _complete_types(op, types)


def _strip_attr_dict(text: str) -> str:
    """Drop a trailing ``{...}`` attribute dictionary (printed after a region's closing brace)."""
    hits = _top_level(text, " {")
    return text[:hits[0]].strip() if hits else text


def _complete_types(op: MlirOp, types: tuple[str, ...]) -> tuple[str, ...]:
    """Triton prints no type for the async tokens of tc_gen5_mma, tmem_store and tmem_load."""
    n = len(op.results)
    if op.name in ("ttng.tc_gen5_mma", "ttng.tmem_store"):
        return ("!ttg.async.token",) * n
    if len(types) >= n:
        return types[:n]
    return types + ("!ttg.async.token",) * (n - len(types))


def _matching(text: str) -> int:
    depth = 1
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _fill_for(op: MlirOp, header: str) -> None:
    m = re.match(r"^scf\.for\s+(?:unsigned\s+)?(%[\w$.-]+)\s*=\s*(%[\w$.#-]+)\s+to\s+(%[\w$.#-]+)\s+step\s+"
                 r"(%[\w$.#-]+)(.*)$", header)
    if not m:
        raise GraphError(f"TTGIR line {op.line}: cannot read the scf.for header {header[:80]!r}")
    iv, lb, ub, step, rest = m.groups()
    args: list[str] = []
    inits: list[str] = []
    at = rest.find("iter_args(")
    if at >= 0:
        inside = rest[at + len("iter_args("):]
        for part in _split_top(inside[:_matching(inside)]):
            name, _, init = part.partition("=")
            args.append(name.strip())
            inits.append(init.strip())
    types: list[str] = []
    arrow = _top_level(rest, "->")
    if arrow:
        after = rest[arrow[0] + 2:].strip()
        if after.startswith("("):
            types = _split_top(after[1:_matching(after[1:]) + 1])
        else:
            types = _split_top(after.split(" : ")[0])
    op.operands = (lb, ub, step, *inits)
    op.result_types = tuple(types[:len(op.results)])
    op.region_args = [(iv, *args)] if op.regions else []
    op.arg_types = {a: t for a, t in zip(args, types, strict=False)}


def parse_module(text: str, first_line: int = 1) -> Module:
    """Parse one MLIR module printed by Triton."""
    return _Reader(text, first_line).read_module()
