"""bench/codegen/war_body.py: an RS wgmma's register-operand waits as ordering edges (issue 21, session 69)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from twill.arch.registry import get_arch
from twill.body_json import body_document
from twill.frontend.programs import load_program
from twill.schedule import Schedule
from twill.validate import validate

ROOT = Path(__file__).resolve().parents[1]
CODEGEN = ROOT / "bench" / "codegen"
sys.path.insert(0, str(CODEGEN))

import war_body  # noqa: E402


def test_fa_gets_one_wait_per_writer_of_p_per_sub_tile():
    """P·V(i-1) reads P in registers: the cast of P(i) and the exp feeding it wait for its completion."""
    # given
    body = load_program("fa_fwd", get_arch("h200"), {"subtiles": 2})
    # when
    edges = war_body.war_edges(body)
    # then
    got = {(e["src"], e["dst"], e["distance"], e["carrier"]) for e in edges}
    assert got == {(f"pv{i}", f"{w}{i}", 1, "order") for i in "01" for w in ("cast", "exp")}
    assert {e["latency"] for e in edges} == {body.op("pv0").latency}


def test_an_ss_wgmma_gets_no_wait():
    """GEMM's wgmmas read both operands from SMEM: no register operand, no edge."""
    assert war_body.war_edges(load_program("gemm", get_arch("h200"), {})) == []


def test_the_stored_body_and_schedule_are_current(monkeypatch):
    """bodies/fa_war.json is what the script writes today, and fa_war.json (solved on it) passes the validator."""
    stored = json.loads((CODEGEN / "bodies" / "fa_war.json").read_text())
    body = load_program("fa_fwd", get_arch(str(CODEGEN / "h200_warpgroup_war.toml")), {"subtiles": 2})
    doc = body_document(body)
    doc["edges"] += war_body.war_edges(body)
    assert stored == json.loads(json.dumps(doc))
    monkeypatch.chdir(ROOT)  # the schedule names its arch file from the repository root
    sched = Schedule.read(CODEGEN / "fa_war.json")
    assert sched.ii == 2661 and validate(None, sched) == []
