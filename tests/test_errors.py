"""Bad input gives one clear line and exit status 2, never a traceback (issue 2, issue 5)."""

from __future__ import annotations

import json
import re

import pytest

from twill.cli import main

GOOD_NODE = {"id": 1, "op_ref": "x", "op_kind": "k", "pipeline": "TC", "latency": 4, "occupancy": 2,
             "rrt": {"TC": [1, 1, 0, 0]}, "min_warps": 1, "regs": 0, "spill_cost": 0, "smem_footprint": 0,
             "tmem_footprint": 0, "variable_latency": False, "streaming": False}


def ddg(nodes, edges, **top):
    doc = {"schema_version": "curated-ddg-0.2", "curation_source": {}, "loops": [
        {"loop_id": 0, "trip_count": 4, "ddg": {"nodes": nodes, "edges": edges}}]}
    doc.update(top)
    return doc


def node(**kw):
    return {**GOOD_NODE, **kw}


def edge(src, dst, **kw):
    return {"src": src, "dst": dst, "distance": 0, "latency": 1, "blocking": False, **kw}


BAD_GRAPHS = {
    "schema": (ddg([node()], [], schema_version="curated-ddg-9"), "schema_version"),
    "unknown node in edge": (ddg([node()], [edge(1, 7)]), "op '7' is not in the loop body"),
    "negative latency": (ddg([node(id=1), node(id=2)], [edge(1, 2, latency=-3)]), "negative"),
    "zero-distance cycle": (ddg([node(id=1), node(id=2)], [edge(1, 2), edge(2, 1)]), "total distance 0"),
    "unknown unit": (ddg([node(pipeline="NPU", rrt={"NPU": [1, 0, 0, 0]})], []), "'NPU'"),
    "missing field": (ddg([{k: v for k, v in GOOD_NODE.items() if k != "regs"}], []), "'regs' is missing"),
    "wrong type": (ddg([node(latency="4")], []), "latency"),
    "rrt longer than latency": (ddg([node(rrt={"TC": [1] * 9})], []), "spans 9 cycles"),
    "duplicate ids": (ddg([node(id=1), node(id=1)], []), "used twice"),
    "streaming without variable latency": (ddg([node(streaming=True)], []), "streaming"),
    "not json": ("{nope", "not valid JSON"),
    "no loops": ({"schema_version": "curated-ddg-0.2", "loops": []}, "non-empty"),
    "min_warps zero": (ddg([node(min_warps=0)], []), "min_warps"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_malformed_graph_is_one_line_exit_2(case, tmp_path, capsys):
    """Each malformed graph names its problem on one stderr line and exits 2."""
    doc, expected = BAD_GRAPHS[case]
    path = tmp_path / "g.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    assert main(["show", str(path), "--arch", "b200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("twill: error:") and expected in err, err


ARCH_OK = (__import__("pathlib").Path(__file__).resolve().parents[1] / "archs" / "h100.toml").read_text()

BAD_ARCHS = {
    "no source": (re.sub(r"^sms = \{.*\}$", "sms = { value = 132 }", ARCH_OK, flags=re.M), "no source"),
    "not toml": ("name = [", "not valid TOML"),
    "missing limit": (ARCH_OK.replace("warps_per_cta = {", "warps_per_ctx = {"), "missing warps_per_cta"),
    "zero capacity": (ARCH_OK.replace('[units.tma]\ncapacity = { value = 1,', '[units.tma]\ncapacity = { value = 0,'),
                      "positive integer"),
    "no name": (ARCH_OK.replace('name = "h100"', ""), "'name'"),
    "negative rate": (re.sub(r"mufu_ops_per_clk = \{ value = [0-9.]+", "mufu_ops_per_clk = { value = -16", ARCH_OK),
                      "negative"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCHS))
def test_malformed_arch_is_one_line_exit_2(case, tmp_path, capsys):
    """Each malformed arch file names its problem on one stderr line and exits 2."""
    text, expected = BAD_ARCHS[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["show", "toy", "--arch", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err


@pytest.mark.parametrize("argv, expected", [
    (["show", "nosuch", "--arch", "h100"], "unknown program 'nosuch'"),
    (["show", "toy", "--arch", "a100x"], "unknown arch 'a100x'"),
    (["show", "fa_fwd", "--arch", "h100", "-p", "tiles=2"], "unknown; this program takes"),
    (["show", "fa_fwd", "--arch", "h100", "-p", "subtiles=two"], "not a valid int"),
    (["show", "fa_fwd", "--arch", "h100", "-p", "subtiles=3"], "must divide"),
    (["validate", "/nonexistent.json"], "cannot read schedule"),
])
def test_bad_arguments(argv, expected, capsys):
    """Bad programs, archs, parameters and files give one clear line and exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err


def test_impossible_memory_is_reported_infeasible(tmp_path, capsys):
    """A buffer larger than shared memory is infeasible at every II, said at once."""
    doc = ddg([node(id=1, pipeline="TMA", rrt={"TMA": [1, 1, 0, 0]}, smem_footprint=10**7,
                    variable_latency=True, streaming=True)], [])
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    assert main(["solve", str(path), "--arch", "b200", "-q"]) == 2
    assert "shared-memory buffer needs 10000000 B" in capsys.readouterr().err


# -- classes of bad input found by bench/fuzz.py (issue 5), one regression case each --------------
def _one_line_exit_2(argv, capsys, expected):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("twill: error:") and expected in err, err


GOOD_DOC = ddg([node(id=1), node(id=2, rrt={"TC": [1, 0, 0, 0]})], [edge(1, 2), edge(2, 1, distance=1)])

BAD_FILES = {  # raw bytes a graph or schedule reader meets: each gives its own reason
    "not utf-8": (b'\xff\xfe{"a": 1}', "not a UTF-8 text file"),
    "integer literal too long": (b'{"a": ' + b"9" * 5000 + b"}", "not valid JSON (Exceeds the limit"),
    "nested too deeply": (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    "truncated": (json.dumps(GOOD_DOC).encode()[:50], "not valid JSON"),
    "lone surrogate": (json.dumps(GOOD_DOC).replace('"op_kind": "k"', '"op_kind": "\\ud800"', 1).encode(),
                       "not valid Unicode text"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ["show", "validate"])
def test_unreadable_files_are_one_line(case, command, tmp_path, capsys):
    """Bytes that are not UTF-8, JSON literals Python refuses, and deep nesting are input errors."""
    data, expected = BAD_FILES[case]
    path = tmp_path / "f.json"
    path.write_bytes(data)
    argv = ["show", str(path), "--arch", "b200"] if command == "show" else ["validate", str(path)]
    _one_line_exit_2(argv, capsys, expected)


@pytest.mark.parametrize("doc, expected", [
    (ddg([node(latency=2**40, rrt={"TC": [1]})], []), "above the limit 1048576"),
    (ddg([node(id=1), node(id=2)], [edge(1, 2, distance=10**12)]), "distance 1000000000000 is above the limit 1024"),
    (ddg([node(regs=2**60)], []), "regs 1152921504606846976 is above the limit"),
])
def test_numbers_beyond_a_tile_loop_are_refused_before_the_solver(doc, expected, tmp_path, capsys):
    """Cycle counts the exact model cannot hold in 64-bit integers are input errors, not solver crashes."""
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    _one_line_exit_2(["solve", str(path), "--arch", "b200", "-q", "--time-limit", "5", "--workers", "1"], capsys,
                     expected)


def _arch_with(pattern, replacement):
    text, n = re.subn(pattern, replacement, ARCH_OK, count=1, flags=re.M)
    assert n == 1, pattern
    return text


BAD_ARCH_VALUES = {
    "warp sizes not integers": (r"^warp_group_sizes = \{ value = \[[^]]*\]", 'warp_group_sizes = { value = ["a", 2]',
                                "list value must hold positive integers"),
    "allocation step zero": (r"^reg_alloc_step = \{ value = \d+", "reg_alloc_step = { value = 0", "outside [1,"),
    "no register budget": (r"^reg_alloc_min = \{ value = \d+", "reg_alloc_min = { value = 300",
                           "leave no register budget"),
    "rate zero": (r"^mufu_ops_per_clk = \{ value = [0-9.]+", "mufu_ops_per_clk = { value = 0", "outside [1e-06,"),
    "rate not finite": (r"^mufu_ops_per_clk = \{ value = [0-9.]+", "mufu_ops_per_clk = { value = nan",
                        "not a finite number"),
    "limit a word": (r"^warps_per_cta = \{ value = \d+", 'warps_per_cta = { value = "x"', "must be an integer"),
    "limit a fraction": (r"^warps_per_cta = \{ value = \d+", "warps_per_cta = { value = 3.7", "must be an integer"),
    "sync cost huge": (r"^mbarrier = \{ value = [0-9.]+", "mbarrier = { value = 1e300", "outside [0, 1.04858e+06]"),
    "unknown feature value": (r'^accumulator = \{ value = "\w+"', 'accumulator = { value = "TMEM"',
                              "features.accumulator must be one of"),
    "async not a flag": (r"^async = true", 'async = "no"', "async must be true or false"),
    "alias of two units": (r'^aliases = \["SFU", "MUFU"\]', 'aliases = ["TC"]', "names both unit"),
    "source not text": (r'^(sms = \{ value = \d+, )source = "[^"]*"', r"\1source = 5", "has no source"),
    "integer literal too long": (r"^(warps_per_cta = \{ value = )\d+", r"\g<1>" + "9" * 5000, "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCH_VALUES))
def test_arch_values_are_checked_at_load(case, tmp_path, capsys):
    """Every number the cost model and the solver read is checked for type, finiteness and range
    when the file is read, so no bad value surfaces later as a crash."""
    pattern, replacement, expected = BAD_ARCH_VALUES[case]
    path = tmp_path / "a.toml"
    path.write_text(_arch_with(pattern, replacement))
    _one_line_exit_2(["show", "fa_fwd", "--arch", str(path)], capsys, expected)


def test_arch_file_not_utf8(tmp_path, capsys):
    """An arch file that is not UTF-8 text names the byte."""
    path = tmp_path / "a.toml"
    path.write_bytes(ARCH_OK.encode() + b"\xff")
    _one_line_exit_2(["show", "toy", "--arch", str(path)], capsys, "not a UTF-8 text file")


BAD_PROGRAMS = {
    "exits at import": ("import sys\nsys.exit(3)\n", "failed to import (SystemExit: 3)"),
    "exits in build": ("import sys\ndef build(arch):\n    sys.exit(0)\n", "build failed (SystemExit: 0)"),
    "parameters not a dict": ("PARAMETERS = 5\ndef build(arch):\n    pass\n", "PARAMETERS must be a dict"),
    "parameter default unparsable": ("PARAMETERS = {'x': None}\ndef build(arch, x):\n    pass\n",
                                     "defaults are bool, int, float or str"),
    "op kind not text": ("from twill import LoopBody, Op\ndef build(arch):\n"
                         "    return LoopBody('p', (Op(name='a', kind=5),), ())\n", "kind must be a string"),
    "uses not segments": ("from twill import LoopBody, Op\ndef build(arch):\n"
                          "    return LoopBody('p', (Op(name='a', uses=[1, 2]),), ())\n", "uses must hold Use segments"),
    "parameter not saveable": ("from twill import LoopBody, Op\ndef build(arch):\n"
                               "    return LoopBody('p', (Op(name='a'),), (), params={'a': object()})\n",
                               "parameters are named by strings"),
    "body name not text": ("from twill import LoopBody, Op\ndef build(arch):\n    return LoopBody(5, [Op(name='a')], [])\n",
                           "name must be a non-empty string"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROGRAMS))
def test_program_files_that_misbehave(case, tmp_path, capsys):
    """A program that exits, declares unusable parameters or builds a malformed body is one error
    line (a program's sys.exit must not end twill with its own status)."""
    text, expected = BAD_PROGRAMS[case]
    path = tmp_path / "p.py"
    path.write_text(text)
    argv = ["solve", str(path), "--arch", "h100", "-q", "--workers", "1", "--out", str(tmp_path / "s.json")]
    if "PARAMETERS" in text:
        argv += ["-p", "x=1"]
    _one_line_exit_2(argv, capsys, expected)


@pytest.fixture(scope="module")
def gemm_schedule():
    from tests.conftest import problem
    from twill.solver.ims import ims_triton_split

    return ims_triton_split(problem("gemm", "h100")).schedule.to_dict()


def _consistent(d):
    for o in d["ops"]:
        o["stage"], o["offset"] = divmod(o["start"], d["ii"])
    return d


BAD_SCHEDULES = {
    "op not in the body": (lambda d: d["ops"].append({**d["ops"][0], "id": "ghost"}), "not in the embedded loop body"),
    "id not text": (lambda d: d["ops"][0].update(id=1.5), "field 'id' must be str"),
    "ii zero": (lambda d: d.update(ii=0), "ii is 0"),
    "ii beyond any loop": (lambda d: _consistent(d.update(ii=10**9) or d), "ii is 1000000000"),
    "seconds too large": (lambda d: d.update(solve_seconds=10**400), "too large for a time"),
    "negative start": (lambda d: _consistent(d["ops"][0].update(start=-5) or d), "starts at -5"),
    "stage disagrees with start": (lambda d: d["ops"][0].update(stage=7), "the file says stage 7"),
    "group undefined": (lambda d: d["ops"][0].update(group=9), "which the file does not define"),
    "count a string": (lambda d: d["groups"][0].update(warps="4"), "field 'warps' must be int"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCHEDULES))
@pytest.mark.parametrize("command", [["validate"], ["simulate", "-n", "3"], ["gantt", "-o", "g.svg"]])
def test_malformed_schedule_files(case, command, gemm_schedule, tmp_path, capsys):
    """A schedule file whose fields have the wrong type or magnitude, or that contradicts its own
    body, is refused on reading, so no reader (validator, simulator, Gantt) crashes or hangs on it."""
    d = json.loads(json.dumps(gemm_schedule))
    change, expected = BAD_SCHEDULES[case]
    change(d)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(d))
    argv = [command[0], str(path), *command[1:]]
    if command[0] == "gantt":
        argv[-1] = str(tmp_path / "g.svg")
    _one_line_exit_2(argv, capsys, expected)


@pytest.mark.parametrize("doc, expected", [
    (ddg([node(rrt={"TC": [3, 0, 0, 0]})], []), "infeasible at every II: op '1': needs 3 instances of unit 'tc'"),
    (ddg([node(min_warps=64)], []), "infeasible at every II: op '1': needs 64 warps"),
    (ddg([node(id=i, pipeline="TMA", rrt={"TMA": [1, 0, 0, 0]}, smem_footprint=100_000, variable_latency=True,
               streaming=True) for i in (1, 2, 3)], []), "shared-memory rings need at least 300000 B"),
    (ddg([node(regs=10**6)], []), "more than any warp group can hold (8 warps x (248 - 24 reserved)"),
])
def test_impossible_problems_are_infeasible_at_once(doc, expected, tmp_path, capsys):
    """An op wider than its unit or the CTA, rings that can never fit SMEM together, and a result
    no warp group can hold are reported as infeasible with the reason, before any search."""
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    _one_line_exit_2(["solve", str(path), "--arch", "b200", "-q", "--workers", "1"], capsys, expected)
