"""Write a program's body with the register-operand waits of an RS wgmma as edges (issue 21, session 69).

    python bench/codegen/war_body.py fa_fwd --arch bench/codegen/h200_warpgroup_war.toml -p subtiles=2 \\
        --out bench/codegen/bodies/fa_war.json

An RS wgmma reads its register operand until it completes, and a loop body that is not unrolled keeps one register
set per loop-carried value: the producer of the operand's next instance may not overwrite it before then. For every
register edge into an asynchronous op that is not in place (FA's cast of P into P·V) this adds an ordering edge from
the reader back to the producer, distance 1, the reader's latency; and the same to that producer's own distance-0
register producers (the exp feeding the cast), where ptxas moves them: Nsight's SASS of fa_cap (session 24) puts the
exp's FFMA and MUFU after P·V's retire. `bench/replay_on_arch.py --rs-operand-war chain` is the same rule in the
simulator. The edges hold whatever the grouping; where P·V sits in another group (a hand-off through SMEM) they
overcharge, as the chain's half is then the buffer's wait, not the registers'.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from twill.arch.registry import get_arch
from twill.body_json import body_document
from twill.frontend.programs import load_program, parse_params, program_info
from twill.ir import Carrier, LoopBody


def war_edges(body: LoopBody) -> list[dict]:
    """The ordering edges of the rule above, as body-document edges."""
    reads = [e for e in body.edges if e.carrier is Carrier.REGISTERS and body.op(e.dst).is_async and not e.in_place]
    out = []
    for e in reads:
        writers = [e.src] + [p.src for p in body.in_edges(e.src) if p.distance == 0
                             and p.carrier is Carrier.REGISTERS and not body.op(p.src).is_async]
        out += [{"src": e.dst, "dst": w, "latency": body.op(e.dst).latency, "distance": 1, "blocking": True,
                 "carrier": "order", "in_place": False} for w in writers]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("--arch", required=True)
    ap.add_argument("-p", "--param", action="append", default=[], help="NAME=VALUE")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    params = parse_params(args.param, program_info(args.program).parameters)
    body = load_program(args.program, get_arch(args.arch), params)
    doc = body_document(body)
    doc["edges"] += war_edges(body)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
