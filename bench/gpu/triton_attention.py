"""A hand-written Triton FlashAttention forward kernel: the Triton baseline of bench/gpu/codegen_fa.py.

This is a baseline, not twill output. It is written in triton.language (not Gluon) in the manner of
Triton's fused-attention tutorial, so that the kernels twill generates can be set beside what Triton's
own compiler (its software pipeliner and wgmma lowering) makes of the same algorithm.

Non-causal attention o = softmax(q k^T * sm_scale) v over [B, H, S, D] tensors. One program computes
BLOCK_M = 128 query rows of one (batch, head) and walks that head's S keys in blocks of BLOCK_N (128, or
64 for head_dim > 128, where a 128-wide block's registers would not fit) with the online softmax: a
running row maximum and row sum, the accumulator rescaled whenever the maximum grows. Scores are
scaled by sm_scale * log2(e) so that exp2 (one MUFU instruction) replaces exp. Q, K, V and O move
through host-made TMA tensor descriptors over the [B*H*S, D] view of each tensor (S being a multiple of
both blocks, no block straddles two heads); num_warps 8, num_stages 3.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

LOG2E = 1.4426950408889634
BLOCK_M = 128
NUM_WARPS = 8
NUM_STAGES = 3


@triton.jit
def _attention_fwd(q_desc, k_desc, v_desc, o_desc, qk_scale, seqlen, HEAD_DIM: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One BLOCK_M x HEAD_DIM tile of O; program_id(0) picks the query block, program_id(1) the head."""
    head_row = tl.program_id(1) * seqlen  # the head's first row in the [B*H*S, D] view
    q_row = head_row + tl.program_id(0) * BLOCK_M
    q = q_desc.load([q_row, 0])
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of the log2-scaled scores
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(score - row_max)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for kv_row in tl.range(head_row, head_row + seqlen, BLOCK_N):
        k = k_desc.load([kv_row, 0])
        scores = tl.dot(q, k.T) * qk_scale
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        p = tl.math.exp2(scores - new_max[:, None])
        shrink = tl.math.exp2(row_max - new_max)  # 0 on the first block (row_max is -inf)
        row_sum = row_sum * shrink + tl.sum(p, 1)
        v = v_desc.load([kv_row, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * shrink[:, None])
        row_max = new_max
    o_desc.store([q_row, 0], (acc / row_sum[:, None]).to(q.dtype))


def block_n_for(head_dim: int) -> int:
    """KV block rows: 128, or 64 above head_dim 128, where the wider tile would spill registers."""
    return 128 if head_dim <= 128 else 64


def launch(q, k, v, o, sm_scale: float):
    """o = softmax(q k^T * sm_scale) v for contiguous CUDA [B, H, S, D] tensors of one dtype (fp16 or bf16).

    S must be a multiple of 128 (no masking: every block is full). Returns the compiled kernel handle.
    """
    b, h, s, d = q.shape
    if any(t.shape != q.shape for t in (k, v, o)):
        raise ValueError(f"q, k, v, o must share one shape; got {[tuple(t.shape) for t in (q, k, v, o)]}")
    if any(t.dtype != q.dtype for t in (k, v, o)) or str(q.dtype) not in ("torch.float16", "torch.bfloat16"):
        raise ValueError(f"q, k, v, o must all be float16 or all bfloat16; got {[t.dtype for t in (q, k, v, o)]}")
    if not all(t.is_contiguous() for t in (q, k, v, o)):
        raise ValueError("q, k, v, o must be contiguous")
    block_n = block_n_for(d)
    if s % BLOCK_M or s % block_n:
        raise ValueError(f"S = {s} must be a multiple of {BLOCK_M} and {block_n}")
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"head_dim {d} must be a power of two from 16 to 256")
    rows = b * h * s

    def desc(t, block_rows: int) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(t.view(rows, d), [block_rows, d])

    grid = (s // BLOCK_M, b * h)
    return _attention_fwd[grid](desc(q, BLOCK_M), desc(k, block_n), desc(v, block_n), desc(o, BLOCK_M),
                                sm_scale * LOG2E, s, HEAD_DIM=d, BLOCK_M=BLOCK_M, BLOCK_N=block_n,
                                num_warps=NUM_WARPS, num_stages=NUM_STAGES)
