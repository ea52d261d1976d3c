"""The Twill paper's running example (Fig. 1): S = Q·Kᵀ, P = exp(S), O += P·V.

One tensor-core op, one exp op and a loop-carried accumulator, every op one (normalised) cycle.
The paper's optimum is II = 2 with S, P, O at cycles 0, 2, 3. Costs here are the paper's unit
costs, not the arch's; the arch only supplies a tensor-core unit ("tc") and an exp unit ("mufu").
"""

from twill import Arch, Carrier, LoopBuilder, Use

DESCRIPTION = "the Twill paper's toy loop (S = gemm, P = exp, O += gemm), unit costs"
PARAMETERS: dict = {}


def build(arch: Arch):
    b = LoopBuilder("toy")
    # Normalised units: a GEMM's issue slots round to 0 next to its ~1000-cycle tile time.
    b.op("S", kind="mma", uses=[Use(unit="tc", length=1)], latency=1, is_async=True, issue_cycles=0)
    b.op("P", kind="exp", uses=[Use(unit="mufu", length=1)], latency=1)
    b.op("O", kind="mma", uses=[Use(unit="tc", length=1)], latency=1, is_async=True, issue_cycles=0)
    b.edge("S", "P", carrier=Carrier.ORDER)
    b.edge("P", "O", carrier=Carrier.ORDER)
    b.edge("O", "O", distance=1, carrier=Carrier.ORDER)
    return b.build()
