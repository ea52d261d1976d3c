"""Triton kernels in the structure of the Triton tutorials, for twill's Triton front end.

Four loops that twill imports (docs/frontend.md): FlashAttention forward with TMA tensor
descriptors (non-causal, head dim 128, the structure of tutorial 06), a TMA GEMM and a persistent
TMA GEMM (the structure of tutorial 09), and a GEMM that loads its tiles through pointers (the
structure of tutorial 03). Each has a launch description next to it (``*.toml``) that names the
signature, the constexprs, the warps and stages and the runtime sizes the trip count follows from.

    twill show examples/triton/kernels.py:attn_fwd --launch examples/triton/fa_fwd.toml --arch h100

The file imports triton; twill itself never imports it (the compile runs in a subprocess).
"""

import triton
import triton.language as tl


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, kv_row, n_ctx, qk_scale,
                    BLOCK_N: tl.constexpr, dtype: tl.constexpr):
    """The KV loop: S = Q K^T, the online softmax in base 2, O = O * alpha + P V."""
    for start_n in tl.range(0, n_ctx, BLOCK_N):  # noqa: B007 (the tutorial's loop variable, unused)
        k = k_desc.load([kv_row, 0]).T
        s = tl.dot(q, k)
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_new = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([kv_row, 0])
        acc = tl.dot(p.to(dtype), v, acc)
        l_i = l_i * alpha + l_new
        m_i = m_new
        kv_row += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def attn_fwd(q_desc, k_desc, v_desc, o_desc, sm_scale, n_ctx, H,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """FlashAttention forward, one (batch x head, Q tile) per program; descriptors are 2-D views
    of [batch * heads * n_ctx, HEAD_DIM] tensors, as in the tutorial's TMA variant."""
    dtype = tl.float16
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    row0 = off_hz * n_ctx
    q_row = row0 + start_m * BLOCK_M
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1/ln(2): exp(x) = exp2(x * log2(e))
    q = q_desc.load([q_row, 0])
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, row0, n_ctx, qk_scale, BLOCK_N, dtype)
    acc = acc / l_i[:, None]
    o_desc.store([q_row, 0], acc.to(dtype))


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, M, N, K,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A B^T with A [M, K] and B [N, K] read through TMA descriptors, one C tile per program."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M
    offs_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([offs_m, k * BLOCK_K])
        b = b_desc.load([offs_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([offs_m, offs_n], acc.to(tl.float16))


@triton.jit
def matmul_tma_persistent(a_desc, b_desc, c_desc, M, N, K, NUM_SMS: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The persistent form: each program walks C tiles start_pid, start_pid + NUM_SMS, ...; the
    tile loop and the K loop are flattened by Triton, so twill reads the K loop before that."""
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        offs_m = (tile_id // num_pid_n) * BLOCK_M
        offs_n = (tile_id % num_pid_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, k_tiles):
            a = a_desc.load([offs_m, k * BLOCK_K])
            b = b_desc.load([offs_n, k * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([offs_m, offs_n], acc.to(tl.float16))


@triton.jit
def matmul_ptr(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A B with pointer loads (LDG / cp.async, no TMA), masked on the K tail as in tutorial 03."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(tl.float16), mask=c_mask)
