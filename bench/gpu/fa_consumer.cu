// The register work of a FlashAttention-forward consumer warpgroup on Hopper, as twill's generated kernel
// (bench/codegen/fa_opt.json) and FA3 run it: one warpgroup of 4 warps (one warp per SM sub-partition)
// owns a 64 x 128 S tile and a 64 x 128 O tile in wgmma accumulator layout, 64 FP32 values of each per
// thread (two rows, 32 columns each).
//
//   kind rates (wg_pipe_kernel): one warpgroup runs `rounds` rounds of one softmax step on its 64 values
//     per thread, shaped as the consumer issues it: ex2 (FFMA + MUFU.EX2 per element, independent),
//     row max (two 32-deep FMNMX chains, two shuffle stages, the running max), row sum (two 32-deep FADD
//     chains, two shuffle stages, l = l * alpha + sum), rescale (64 independent FMUL), cast (32 independent
//     F2FP packs). Conditions: alone; beside a second warpgroup that streams the other consumer's
//     tensor-core work (8 RS wgmma m64n128k16 P.V + 8 SS wgmma m64n128k16 Q.K^T per commit group, one
//     group in flight) for as long, or beside 16 SS wgmmas per group (no register operand: whether the RS
//     wgmma's register reads are what slows the step); and paired (both warpgroups run the same step: two warps per
//     sub-partition, the pipe's rate when one warp cannot fill it); or beside a warpgroup streaming stmatrix stores
//     of a 16 KiB tile (a hand-off's store), with or without a third warpgroup streaming wgmmas.
//   consumer loop (fa_loop_kernel): the whole consumer of twill's fa_opt kernel with K and V resident in
//     shared memory (no TMA, no producer): per KV step alpha, rescale, cast, [turn], P.V (RS) and Q.K^T
//     (SS) issue, [pass the turn], row sum, wait, row max, running max, exp. One warpgroup alone (the
//     consumer's own chain) or two taking tensor-core turns on hardware named barriers (bar.sync 15/14,
//     bar.arrive) exactly as the generated kernel does. Optional clock64 stamps split each step.
//
// Checks (a failed check reports no time): every kind's final per-thread values are recomputed on the
// host (bit-exact for max, sums, products and packs; within 1e-4 for the approximate ex2); the partner's
// accumulators equal the host's Q.K^T and P.V within 1e-3; the stmatrix stream's last tile reads back word for
// word; the consumer loop's O / l equals the host's
// fp64 softmax(Q K^T * scale) V (every KV block is the same tile, so n blocks give one block's
// attention) within a relative L2 error of 4e-3 (the generated kernels' tolerance) for every row.
#include <cuda_fp16.h>

#include <array>
#include <cstring>
#include <random>

#include "common.cuh"
#include "wgmma_ops.cuh"

constexpr int kRows = 128, kCols = 128;         // Q rows (two 64-row sub-tiles), head dim = KV block = 128
constexpr int kTileBytes = kRows * kCols * 2;  // one fp16 128 x 128 tile in shared memory
constexpr int kChunkBytes = kRows * 32;        // one 16-column K step of a 128-row tile (4 KiB)
constexpr uint32_t kLbo = 128, kSbo = 256;      // no-swizzle core matrices (wgmma.json descriptor_probe)

// ---------------------------------------------------------------------------------------------
// layout helpers (host and device)
// Byte offset of element (r, c) of a 128 x 128 fp16 tile stored as 8 K-step chunks of 128 rows x 32 bytes,
// each chunk in 8-row x 16-byte core matrices (the layout of wgmma.cu, one chunk per 16 columns).
__host__ __device__ __forceinline__ int tile_offset(int r, int c) {
  const int cb = (c % 16) * 2;
  return (c / 16) * kChunkBytes + ((r / 8) * 2 + cb / 16) * 128 + (r % 8) * 16 + cb % 16;
}

// Accumulator element i of a thread (wgmma m64nNk16, FP32 D): row within the warpgroup's 64 rows and column.
__host__ __device__ __forceinline__ int acc_row(int warp, int lane, int i) { return 16 * warp + lane / 4 + 8 * ((i >> 1) & 1); }
__host__ __device__ __forceinline__ int acc_col(int lane, int i) { return 8 * (i >> 2) + 2 * (lane % 4) + (i & 1); }
// The k-th of the 32 elements of row half h (0: row g, 1: row g + 8) of a thread's 64.
__host__ __device__ __forceinline__ constexpr int half_idx(int h, int k) { return (k >> 1) * 4 + h * 2 + (k & 1); }

// ---------------------------------------------------------------------------------------------
// device helpers
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) {
  return uint64_t((saddr >> 4) & 0x3FFF) | (uint64_t((kLbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((kSbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t h;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(hi), "f"(lo));
  return h;
}

__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// O += P.V: 8 RS wgmma m64n128k16 (A = P from registers, 4 per K step; B = V^T chunk kk).
__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&a)[32], uint32_t vt, int acc) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t f[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
    wgmma_rs<128, 0>(o, f, make_desc(vt + kk * kChunkBytes), acc | (kk != 0));
  }
}

// S = Q_w.K^T: 8 SS wgmma m64n128k16, a fresh accumulator (scale-d 0 on the first K step), or added to it (``acc``).
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t q, uint32_t k, bool acc = false) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    wgmma_ss<128, 0>(s, make_desc(q + kk * kChunkBytes), make_desc(k + kk * kChunkBytes), acc || kk != 0);
}

// P (fp32, accumulator layout) -> the RS A fragments of P.V (fp16 pairs; register j of K step kk holds
// row g + 8(j&1), columns 16kk + 8(j>>1) + 2t, +1: accumulator elements i0 = 4(2kk + (j>>1)) + 2(j&1), i0+1).
__device__ __forceinline__ void cast_p(const float (&p)[64], uint32_t (&a)[32]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i0 = 4 * (2 * kk + (j >> 1)) + 2 * (j & 1);
      a[4 * kk + j] = pack_f16x2(p[i0], p[i0 + 1]);
    }
}

// Row max as Triton emits it: a 32-deep chain per row, two butterfly stages across the quad.
__device__ __forceinline__ void row_max(const float (&s)[64], float (&mx)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float t = s[half_idx(h, 0)];
#pragma unroll
    for (int k = 1; k < 32; ++k) t = fmaxf(t, s[half_idx(h, k)]);
    t = fmaxf(t, __shfl_xor_sync(0xFFFFFFFFu, t, 1));
    t = fmaxf(t, __shfl_xor_sync(0xFFFFFFFFu, t, 2));
    mx[h] = t;
  }
}

__device__ __forceinline__ void row_sum(const float (&p)[64], float (&sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float t = p[half_idx(h, 0)];
#pragma unroll
    for (int k = 1; k < 32; ++k) t += p[half_idx(h, k)];
    t += __shfl_xor_sync(0xFFFFFFFFu, t, 1);
    t += __shfl_xor_sync(0xFFFFFFFFu, t, 2);
    sum[h] = t;
  }
}

// ---------------------------------------------------------------------------------------------
// shared-memory image: Q, K, V^T tiles (fp16, tile_offset layout) filled from row-major global copies
struct Tiles {
  const uint16_t* q;   // 128 x 128, row-major
  const uint16_t* k;   // 128 keys x 128 dims
  const uint16_t* vt;  // 128 dims x 128 keys (V transposed: K-major B of P.V)
  const uint32_t* p0;  // the partner's constant P fragments: [128 threads][32]
};

__device__ void fill_tiles(uint8_t* smem, const Tiles& t) {
  const uint16_t* src[3] = {t.q, t.k, t.vt};
  for (int m = 0; m < 3; ++m)
    for (int e = threadIdx.x; e < kRows * kCols; e += blockDim.x)
      *reinterpret_cast<uint16_t*>(smem + m * kTileBytes + tile_offset(e / kCols, e % kCols)) = src[m][e];
  fence_proxy_async_smem();  // generic-proxy stores read next by the tensor cores
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Part 1: one softmax step's rate from one warpgroup
// Output layout of wg_pipe_kernel: [2][128][66] step values, then the partner's O [128][64], then the
// step warpgroup's own accumulator [128][64] (kOwn*).
constexpr int kOwnSlot = 2 * 128 * 66 + 128 * 64, kStsmSlot = kOwnSlot + 128 * 64, kPipeOutFloats = kStsmSlot + 128;

enum Kind : int { kEx2 = 0, kRowMax, kRowSum, kRescale, kCast, kKinds };
static const char* kKindName[kKinds] = {"ex2", "row_max", "row_sum", "rescale", "cast"};
// instructions of the step per thread and round, for the record
static const char* kKindShape[kKinds] = {
    "64 x (FFMA + MUFU.EX2), independent",
    "2 rows x (32-deep FMNMX chain from the running max, 2 x (SHFL.BFLY + FMNMX), FMUL + FMNMX)",
    "2 rows x (FFMA + 31-deep FADD chain, 2 x (SHFL.BFLY + FADD), FFMA l = l * alpha + sum)",
    "64 FMUL, independent",
    "32 F2FP.F16.F32.PACK_AB, independent"};
// elements of the 64 x 128 tile the step processes per round (its n in the cost model)
static const int kKindElems[kKinds] = {8192, 8192, 8192, 8192, 8192};

// kOwn*: the warpgroup running the step also has its own wgmma commit group in flight through each
// round (issued before the round, retired with wait_group 1 after it, so one group always overlaps the
// step), as a consumer that issues Q.K^T(j+1) or P.V(j) before softmax(j) runs it (FA3's order):
// 8 SS wgmma m64n128k16 (Q.K^T), 8 RS (P.V, A from registers), or 8 SS while warpgroup 1 streams as in
// kBeside. MUFU and the wgmmas share the warp's MIO queue (Nsight on FA3's order, docs/benchmarks.md).
// kBesideStsm*: another warpgroup streams stmatrix.x4 stores of a 16 KiB tile into shared memory for as long as the
// step runs (a register hand-off's store, FA's P handed to another group, docs/benchmarks_notes.md session 68):
// whether the store and MUFU share the sub-partition's MIO queue; kBesideStsmWgmma adds a third warpgroup that streams
// the other consumer's wgmmas as in kBeside, the hand-off kernel's three groups at once. kPairBeside (session 69):
// two warpgroups on the step at once while a third streams SS Q.K^T wgmmas, two FA consumers' exps overlapping
// beside the tensor core (what Nsight per line shows FA3's order paying).
// kBesideWaiting (session 70): the partner issues its 16 SS wgmmas and waits for all of them (wait_group 0) before
// the next group, so its warps mostly wait while the tensor core runs, as a consumer waiting at its retire does
// (fa_opt's other consumer); kBesideSS's partner keeps one group in flight and issues the next at once.
enum Mode : int { kAlone = 0, kBeside = 1, kPair = 2, kBesideSS = 3, kOwnSS = 4, kOwnRS = 5, kOwnBeside = 6,
                  kBesideStsm = 7, kBesideStsmWgmma = 8, kPairBeside = 9, kBesideWaiting = 10, kModes };
static const char* kModeName[kModes] = {"alone", "beside_wgmma", "pair", "beside_wgmma_ss", "own_wgmma_ss",
                                        "own_wgmma_rs", "own_wgmma_ss_beside_wgmma", "beside_stsm",
                                        "beside_stsm_and_wgmma", "pair_beside_wgmma", "beside_wgmma_waiting"};
__host__ __device__ constexpr bool has_partner(int mode) {
  return mode == kBeside || mode == kBesideSS || mode == kOwnBeside || mode == kBesideStsmWgmma || mode == kPairBeside ||
         mode == kBesideWaiting;
}
// how many warpgroups run the step (warpgroups 0 and 1 in the pair modes)
__host__ __device__ constexpr int steps_of(int mode) { return mode == kPair || mode == kPairBeside ? 2 : 1; }
__host__ __device__ constexpr bool has_own(int mode) { return mode == kOwnSS || mode == kOwnRS || mode == kOwnBeside; }
__host__ __device__ constexpr bool has_stsm(int mode) { return mode == kBesideStsm || mode == kBesideStsmWgmma; }
__host__ __device__ constexpr int threads_of(int mode) {
  return mode == kBesideStsmWgmma || mode == kPairBeside ? 384 : 256;
}
constexpr int kStsmOffset = 3 * kTileBytes, kStsmBytes = 16 * 1024;  // after Q, K, V^T: 112 KiB of the 120
static_assert(kStsmOffset + kStsmBytes <= kOneCtaPerSmSmem, "the stmatrix tile must fit the CTA's shared memory");

struct PipeParams {
  int rounds;
  float neg1, zero, half, shrink, one, hi;  // runtime constants the compiler cannot fold
};

struct PipeOut {
  uint64_t cycles[2];  // per warpgroup running the step (second: pair mode only)
  uint64_t partner_cycles, partner_groups, ns;
  uint64_t own_issue_cycles, own_groups;  // kOwn*: cycles from fence to commit, summed; commit groups issued
  uint64_t own_step_cycles;  // kOwn*: the step's own cycles (after the commit, before the wait), summed
  uint64_t stsm_cycles, stsm_rounds;  // kBesideStsm*: warp 0 of the storing warpgroup, 16 KiB per round
  uint32_t smid, pad;
};

__host__ __device__ inline float init_value(int kind, int tid, int i) {
  uint32_t h = uint32_t(tid) * 0x9E3779B1u ^ uint32_t(i + 1) * 0x85EBCA77u;
  h ^= h >> 16;
  const float u = float(h & 0xFFFF) / 65536.f;  // [0, 1)
  switch (kind) {
    case kEx2: return 0.25f + 0.5f * u;
    case kRescale: return 1.f + u;
    case kCast: return 1.f + u / 64.f;
    default: return u - 0.5f;
  }
}

template <int KIND>
__device__ __forceinline__ void pipe_round(float (&x)[64], float (&m)[2], const PipeParams& pp) {
  if constexpr (KIND == kEx2) {
#pragma unroll
    for (int i = 0; i < 64; ++i) x[i] = ex2(fmaf(x[i], pp.neg1, pp.zero));
  } else if constexpr (KIND == kRowMax) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float t = m[h];
#pragma unroll
      for (int k = 0; k < 32; ++k) t = fmaxf(t, x[half_idx(h, k)]);
      t = fmaxf(t, __shfl_xor_sync(0xFFFFFFFFu, t, 1));
      t = fmaxf(t, __shfl_xor_sync(0xFFFFFFFFu, t, 2));
      m[h] = fmaxf(m[h], t * pp.one);
    }
  } else if constexpr (KIND == kRowSum) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float t = fmaf(m[h], pp.zero, x[half_idx(h, 0)]);
#pragma unroll
      for (int k = 1; k < 32; ++k) t += x[half_idx(h, k)];
      t += __shfl_xor_sync(0xFFFFFFFFu, t, 1);
      t += __shfl_xor_sync(0xFFFFFFFFu, t, 2);
      m[h] = fmaf(m[h], pp.half, t);
    }
  } else if constexpr (KIND == kRescale) {
#pragma unroll
    for (int i = 0; i < 64; ++i) x[i] *= (i & 2) ? pp.shrink : pp.one;
  } else if constexpr (KIND == kCast) {
#pragma unroll
    for (int j = 0; j < 32; ++j) x[j] = __uint_as_float(pack_f16x2(x[j], pp.hi));
  }
}

// wgmma is .aligned: all four warps of a streaming warpgroup must leave its loop after the same group, so thread 0's
// reading of the sthe words salted by the round so that no store repeats the last, until warpgroup 0 is done;
// then it reads its share back and counts the words that differ from its last round's (0: every store landed).
__device__ void stsm_stream(uint8_t* smem, volatile int& done, float* out, PipeOut* times) {
  const int wtid = threadIdx.x % 128, w = wtid / 32, lane = wtid % 32;
  uint8_t* buf = smem + kStsmOffset;
  uint32_t key[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) key[i][j] = (uint32_t(w) << 24) | (uint32_t(i) << 16) | (uint32_t(j) << 8) | uint32_t(lane);
  const uint64_t c0 = clock_cycles();
  uint32_t rounds = 0;
  bool stop = false;
  do {
    const uint32_t salt = rounds * 0x9E3779B1u;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      // lane l gives row l % 8 of matrix l / 8; matrix j of step i is 128 bytes at ((w * 8 + i) * 4 + j) * 128
      const uint32_t r[4] = {key[i][0] ^ salt, key[i][1] ^ salt, key[i][2] ^ salt, key[i][3] ^ salt};
      stmatrix_x4(smem_addr(buf + ((w * 8 + i) * 4 + lane / 8) * 128 + (lane % 8) * 16), r);
    }
    ++rounds;
    stop = __shfl_sync(0xFFFFFFFFu, done, 0) != 0;  // one value per warp (stmatrix is warp-collective)
  } while (!stop);
  const uint64_t c1 = clock_cycles();
  __syncwarp();
  const uint32_t salt = (rounds - 1) * 0x9E3779B1u;
  uint32_t bad = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)  // lane l holds row l / 4, bytes 4 (l % 4) .. +4 of each matrix
      bad += *reinterpret_cast<volatile uint32_t*>(buf + ((w * 8 + i) * 4 + j) * 128 + (lane / 4) * 16 + (lane % 4) * 4) !=
             (key[i][j] ^ salt);
  if (blockIdx.x == 0) out[kStsmSlot + wtid] = float(bad);
  if (wtid == 0) {
    times[blockIdx.x].stsm_cycles = c1 - c0;
    times[blockIdx.x].stsm_rounds = rounds;
  }
}

// Warpgroup 0 runs the step (with its own wgmma groups in flight: kOwn*); warpgroup 1 streams P.V + Q.K^T
// wgmmas (kBeside, kOwnBeside), runs the step too (kPair) or streams stmatrix stores (kBesideStsm*, whose
// wgmmas, if any, come from warpgroup 2).
template <int KIND, int MODE>
__global__ void __launch_bounds__(threads_of(MODE), 1)
    wg_pipe_kernel(Tiles tiles, PipeParams pp, float* out, PipeOut* times) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ volatile int done;
  __shared__ volatile int stop_all;
  __shared__ unsigned long long t0;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
  if (has_partner(MODE) || has_own(MODE)) fill_tiles(smem, tiles);
  if (tid == 0) done = 0;
  __syncthreads();
  if (tid == 0) t0 = clock_cycles();
  __syncthreads();
  const uint64_t g0 = global_ns();
  if (wg < steps_of(MODE)) {
    float x[64], m[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 64; ++i) x[i] = init_value(KIND, wtid, i);
    float acc[64];  // kOwn*: the warpgroup's own accumulator (S = Q.K^T or O = P.V)
    uint32_t a[32];
    if constexpr (has_own(MODE)) {
#pragma unroll
      for (int i = 0; i < 32; ++i) a[i] = tiles.p0[wtid * 32 + i];
    }
    const uint32_t q = smem_addr(smem) + 64 * 32, k = smem_addr(smem + kTileBytes), vt = smem_addr(smem + 2 * kTileBytes);
    uint64_t issue = 0, step = 0;
    bar_sync(1 + wg, 128);
    const uint64_t c0 = clock_cycles();
    for (int r = 0; r < pp.rounds; ++r) {
      if constexpr (has_own(MODE)) {
        const uint64_t i0 = clock_cycles();
        wg_fence();
        if (MODE == kOwnRS)
          issue_pv(acc, a, vt, 0);  // O = P0.V (scale-d 0 on the first K step)
        else
          issue_qk(acc, q, k);
        wg_commit();
        const uint64_t i1 = clock_cycles();
        issue += i1 - i0;
        pipe_round<KIND>(x, m, pp);
        step += clock_cycles() - i1;
        wg_wait<1>();
      } else {
        pipe_round<KIND>(x, m, pp);
      }
    }
    if constexpr (has_own(MODE)) {
      wg_wait<0>();
      fence_operands(acc);
      fence_operands(a);
    }
    bar_sync(1 + wg, 128);
    const uint64_t c1 = clock_cycles();
    if (wtid == 0) {
      times[blockIdx.x].cycles[wg] = c1 - c0;
      atomicAdd((int*)&done, 1);  // the partner and the stream stop once every step warpgroup is done
      if (has_own(MODE)) {
        times[blockIdx.x].own_issue_cycles = issue;
        times[blockIdx.x].own_groups = pp.rounds;
        times[blockIdx.x].own_step_cycles = step;
      }
    }
    if (has_own(MODE) && blockIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < 64; ++i) out[kOwnSlot + wtid * 64 + i] = acc[i];
    }
    if (blockIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < 64; ++i) out[(wg * 128 + wtid) * 66 + i] = x[i];
      out[(wg * 128 + wtid) * 66 + 64] = m[0];
      out[(wg * 128 + wtid) * 66 + 65] = m[1];
    }
  } else if (has_stsm(MODE) && wg == 1) {
    stsm_stream(smem, done, out, times);
  } else if (has_partner(MODE)) {
    // three warpgroups leave 168 registers a thread: there the partner streams SS Q.K^T into one accumulator
    constexpr bool one_acc = MODE == kBesideStsmWgmma || MODE == kPairBeside;
    float s[64], o[64];
    uint32_t a[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) a[i] = one_acc ? 0u : tiles.p0[wtid * 32 + i];
    const uint32_t q = smem_addr(smem) + 64 * 32, k = smem_addr(smem + kTileBytes), vt = smem_addr(smem + 2 * kTileBytes);
    const uint64_t c0 = clock_cycles();
    uint64_t groups = 0;
    bool stop = false;
    do {
      wg_fence();
      if constexpr (one_acc) {  // 2 S into one accumulator: 16 live wgmmas (a chain overwritten unread, ptxas drops)
        issue_qk(s, q, k);
        issue_qk(s, q, k, true);
      } else {
        if (MODE == kBeside || MODE == kOwnBeside)
          issue_pv(o, a, vt, 0);
        else
          issue_qk(o, q, k);  // O = S: the same check, SS only
        issue_qk(s, q, k);
      }
      wg_commit();
      if constexpr (MODE == kBesideWaiting)
        wg_wait<0>();
      else
        wg_wait<1>();
      ++groups;
      stop = warpgroup_agrees(wtid, done >= steps_of(MODE), stop_all);
    } while (!stop);
    wg_wait<0>();
    fence_operands(s);
    if constexpr (!one_acc) {
      fence_operands(o);
      fence_operands(a);
    }
    const uint64_t c1 = clock_cycles();
    if (wtid == 0) {
      times[blockIdx.x].partner_cycles = c1 - c0;
      times[blockIdx.x].partner_groups = groups;
    }
    if (blockIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        if (steps_of(MODE) == 1) out[(128 + wtid) * 66 + i] = one_acc ? 0.5f * s[i] : s[i];  // else warpgroup 1's step writes there
        out[2 * 128 * 66 + wtid * 64 + i] = one_acc ? 0.5f * s[i] : o[i];  // one_acc: s = 2 S, exactly halved
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    times[blockIdx.x].ns = global_ns() - g0;
    times[blockIdx.x].smid = sm_id();
  }
}

// Part 1b (session 70): two different steps at once. Warpgroup 0 runs step K0, warpgroup 1 step K1 (two warps per
// sub-partition, one of each), with BESIDE a third warpgroup streaming SS Q.K^T wgmmas into one accumulator (16 live
// per group) as in kPairBeside. Each step warpgroup runs up to `rounds` rounds and stops, within 8 rounds, once the
// other has finished its own: both are timed over about the same window, the rate of each step while the other runs.
struct CrossOut {
  uint64_t cycles[2];
  uint32_t rounds_done[2];
  uint64_t partner_cycles, partner_groups;
  uint32_t smid, pad;
};

template <int K0, int K1, bool BESIDE>
__global__ void __launch_bounds__(BESIDE ? 384 : 256, 1)
    cross_kernel(Tiles tiles, PipeParams pp, float* out, CrossOut* times) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ volatile int finished, stepping, stop_all;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
  if (BESIDE) fill_tiles(smem, tiles);
  if (tid == 0) finished = 0, stepping = 2;
  __syncthreads();
  if (wg < 2) {
    float x[64], m[2] = {0.f, 0.f};
    const int kind = wg == 0 ? K0 : K1;
#pragma unroll
    for (int i = 0; i < 64; ++i) x[i] = init_value(kind, wtid, i);
    bar_sync(1 + wg, 128);
    const uint64_t c0 = clock_cycles();
    int r = 0;
    bool stop = false;
    while (r < pp.rounds && !stop) {
#pragma unroll 1
      for (int j = 0; j < 8; ++j, ++r) {
        if (wg == 0)
          pipe_round<K0>(x, m, pp);
        else
          pipe_round<K1>(x, m, pp);
      }
      stop = __shfl_sync(0xFFFFFFFFu, finished, 0) != 0;
    }
    bar_sync(1 + wg, 128);
    const uint64_t c1 = clock_cycles();
    if (wtid == 0) {
      finished = 1;
      times[blockIdx.x].cycles[wg] = c1 - c0;
      times[blockIdx.x].rounds_done[wg] = uint32_t(r);
      atomicSub((int*)&stepping, 1);
    }
    if (blockIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < 64; ++i) out[(wg * 128 + wtid) * 66 + i] = x[i];
      out[(wg * 128 + wtid) * 66 + 64] = m[0];
      out[(wg * 128 + wtid) * 66 + 65] = m[1];
    }
  } else if (BESIDE) {
    float s[64];
    const uint32_t q = smem_addr(smem) + 64 * 32, k = smem_addr(smem + kTileBytes);
    const uint64_t c0 = clock_cycles();
    uint64_t groups = 0;
    bool stop = false;
    do {
      wg_fence();
      issue_qk(s, q, k);
      issue_qk(s, q, k, true);
      wg_commit();
      wg_wait<1>();
      ++groups;
      stop = warpgroup_agrees(wtid, stepping <= 0, stop_all);
    } while (!stop);
    wg_wait<0>();
    fence_operands(s);
    const uint64_t c1 = clock_cycles();
    if (wtid == 0) {
      times[blockIdx.x].partner_cycles = c1 - c0;
      times[blockIdx.x].partner_groups = groups;
    }
    if (blockIdx.x == 0)
#pragma unroll
      for (int i = 0; i < 64; ++i) out[2 * 128 * 66 + wtid * 64 + i] = 0.5f * s[i];  // 2 S, exactly halved
  }
  __syncthreads();
  if (tid == 0) times[blockIdx.x].smid = sm_id();
}

// Part 1c (session 70): who keeps its rate when two steps meet. Each round both step warpgroups meet at a named
// barrier; warpgroup 0 starts its step K0 at once, warpgroup 1 its step K1 `delay` cycles later (a spin on the SM
// clock). The rounds' cycles of each, against the delay, tell fair sharing (both slow while they overlap) from a
// priority (the one that started keeps its rate, the other waits).
template <int K0, int K1>
__global__ void __launch_bounds__(256, 1)
    stagger_kernel(PipeParams pp, int delay, float* out, CrossOut* times) {
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
  float x[64], m[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 64; ++i) x[i] = init_value(wg == 0 ? K0 : K1, wtid, i);
  uint64_t spent = 0;
  for (int r = 0; r < pp.rounds; ++r) {
    bar_sync(1, 256);
    const uint64_t met = clock_cycles();
    if (wg == 1)
      while (clock_cycles() - met < uint64_t(delay)) {
      }
    const uint64_t c0 = clock_cycles();
    if (wg == 0)
      pipe_round<K0>(x, m, pp);
    else
      pipe_round<K1>(x, m, pp);
    bar_sync(2 + wg, 128);  // the warpgroup's four warps are done
    spent += clock_cycles() - c0;
  }
  if (wtid == 0) {
    times[blockIdx.x].cycles[wg] = spent;
    times[blockIdx.x].rounds_done[wg] = uint32_t(pp.rounds);
    if (wg == 0) times[blockIdx.x].smid = sm_id();
  }
  if (blockIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 64; ++i) out[(wg * 128 + wtid) * 66 + i] = x[i];
    out[(wg * 128 + wtid) * 66 + 64] = m[0];
    out[(wg * 128 + wtid) * 66 + 65] = m[1];
  }
}

// ---------------------------------------------------------------------------------------------
// Part 2: the consumer loop
struct LoopOut {
  uint64_t cycles[2];     // per warpgroup, from the end of the prologue to the end of the last KV step
  uint32_t stamps[2][5];  // kStamp: summed cycles of [alpha..cast, turn wait, wgmma issue, issue..wait, rowmax..exp]
  uint64_t ns;
  uint32_t smid, pad;
};

__device__ __forceinline__ uint32_t clock32() {
  uint32_t c;
  asm volatile("mov.u32 %0, %%clock;" : "=r"(c)::"memory");
  return c;
}

// The consumer's registers: S, P (exps), O accumulators, P's fp16 fragments, row statistics.
struct Consumer {
  float s[64], p[64], o[64], m[2], m_old[2], l[2];
  uint32_t a[32];
};

__device__ __forceinline__ void max_and_exp(Consumer& c, float scale) {
  float mx[2];
  row_max(c.s, mx);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    c.m_old[h] = c.m[h];
    c.m[h] = fmaxf(c.m[h], mx[h] * scale);
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) c.p[i] = ex2(fmaf(c.s[i], scale, -c.m[(i >> 1) & 1]));
}

// One KV step of the generated kernel's consumer (fa_opt.py, partition_g1's loop body); kLast: the
// epilogue step, P.V of the last block only. Stamps (32-bit clocks) split it when kStamp.
template <bool kPingPong, bool kStamp, bool kLast>
__device__ __forceinline__ void kv_step(Consumer& c, int w, uint32_t q, uint32_t k, uint32_t vt, float scale,
                                        uint32_t& ta, uint32_t (&st)[5]) {
  float alpha[2], sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) alpha[h] = ex2(c.m_old[h] - c.m[h]);
#pragma unroll
  for (int i = 0; i < 64; ++i) c.o[i] *= alpha[(i >> 1) & 1];
  cast_p(c.p, c.a);
  uint32_t tb = 0, tc = 0, td = 0, te = 0;
  if (kStamp) tb = clock32();
  if (kPingPong) bar_sync(15 - w, 256);  // wait for this warpgroup's tensor-core turn
  if (kStamp) tc = clock32();
  wg_fence();
  issue_pv(c.o, c.a, vt, 1);
  if (!kLast) issue_qk(c.s, q, k);
  wg_commit();
  if (kStamp) td = clock32();
  if (kPingPong && !(kLast && w == 1)) bar_arrive(14 + w, 256);  // pass the turn
  row_sum(c.p, sum);
#pragma unroll
  for (int h = 0; h < 2; ++h) c.l[h] = fmaf(c.l[h], alpha[h], sum[h]);
  wg_wait<0>();
  fence_operands(c.s);
  fence_operands(c.o);
  fence_operands(c.a);
  if (kStamp) te = clock32();
  if (!kLast) max_and_exp(c, scale);
  if (kStamp) {
    const uint32_t tf = clock32();
    st[0] += tb - ta;
    st[1] += tc - tb;
    st[2] += td - tc;
    st[3] += te - td;
    st[4] += tf - te;
    ta = tf;
  }
}

template <bool kPingPong, bool kStamp>
__global__ void __launch_bounds__(256, 1)
    fa_loop_kernel(Tiles tiles, int n, float scale, float* out, LoopOut* times) {
  extern __shared__ __align__(1024) uint8_t smem[];
  fill_tiles(smem, tiles);
  const int tid = threadIdx.x, w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const uint32_t q = smem_addr(smem) + w * 64 * 32, k = smem_addr(smem + kTileBytes),
                 vt = smem_addr(smem + 2 * kTileBytes);
  Consumer c;
#pragma unroll
  for (int i = 0; i < 64; ++i) c.o[i] = 0.f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    c.m[h] = -INFINITY;
    c.l[h] = 0.f;
  }
  uint32_t st[5] = {0, 0, 0, 0, 0};
  // prologue: S of step 0, its row max and exps (both warpgroups at once, as the generated kernel does)
  wg_fence();
  issue_qk(c.s, q, k);
  wg_commit();
  wg_wait<0>();
  fence_operands(c.s);
  max_and_exp(c, scale);
  if (kPingPong) {
    __syncthreads();
    if (w == 1) bar_arrive(15, 256);  // round -1: the first turn is warpgroup 0's
  }
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  uint32_t ta = clock32();
  for (int t = 1; t < n; ++t) kv_step<kPingPong, kStamp, false>(c, w, q, k, vt, scale, ta, st);
  kv_step<kPingPong, kStamp, true>(c, w, q, k, vt, scale, ta, st);
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if ((tid % 128) == 0) {
    times[blockIdx.x].cycles[w] = c1 - c0;
#pragma unroll
    for (int j = 0; j < 5; ++j) times[blockIdx.x].stamps[w][j] = st[j];
    if (w == 0) times[blockIdx.x].ns = g1 - g0;
  }
  if (blockIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 64; ++i)
      out[(64 * w + acc_row(warp, lane, i)) * kCols + acc_col(lane, i)] = c.o[i] / c.l[(i >> 1) & 1];
  }
  __syncthreads();
  if (tid == 0) times[blockIdx.x].smid = sm_id();
}

// ---------------------------------------------------------------------------------------------
// host
static uint16_t h_f16(float v) {
  __half h = __float2half_rn(v);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
static float f16_h(uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}

struct HostTiles {
  std::vector<uint16_t> q, k, vt;
  std::vector<uint32_t> p0;
  std::vector<float> qf, kf, vtf, p0f;  // decoded values; p0f row-major 64 x 128
};

static HostTiles make_tiles(std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  HostTiles h;
  for (auto* v : {&h.q, &h.k, &h.vt}) {
    v->resize(kRows * kCols);
    for (auto& e : *v) e = h_f16(uni(rng));
  }
  for (auto [src, dst] : {std::pair{&h.q, &h.qf}, {&h.k, &h.kf}, {&h.vt, &h.vtf}}) {
    dst->resize(src->size());
    for (size_t i = 0; i < src->size(); ++i) (*dst)[i] = f16_h((*src)[i]);
  }
  // The partner's P: 64 x 128 values in (0, 1], fragments as cast_p lays them out.
  h.p0f.resize(64 * kCols);
  for (auto& e : h.p0f) e = f16_h(0.5f + 0.5f * uni(rng));
  h.p0.resize(128 * 32);
  for (int t = 0; t < 128; ++t) {
    const int warp = t / 32, lane = t % 32, g = lane / 4 + 16 * warp, c = lane % 4;
    for (int kk = 0; kk < 8; ++kk)
      for (int j = 0; j < 4; ++j) {
        const int row = g + 8 * (j & 1), col = 16 * kk + 8 * (j >> 1) + 2 * c;
        h.p0[t * 32 + 4 * kk + j] = uint32_t(h_f16(h.p0f[row * kCols + col])) |
                                    (uint32_t(h_f16(h.p0f[row * kCols + col + 1])) << 16);
      }
  }
  return h;
}

struct DevTiles {
  Tiles t{};
  std::vector<void*> bufs;
  explicit DevTiles(const HostTiles& h) {
    auto up = [&](const void* src, size_t bytes) {
      void* d = nullptr;
      CK(cudaMalloc(&d, bytes));
      CK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
      bufs.push_back(d);
      return d;
    };
    t.q = static_cast<const uint16_t*>(up(h.q.data(), h.q.size() * 2));
    t.k = static_cast<const uint16_t*>(up(h.k.data(), h.k.size() * 2));
    t.vt = static_cast<const uint16_t*>(up(h.vt.data(), h.vt.size() * 2));
    t.p0 = static_cast<const uint32_t*>(up(h.p0.data(), h.p0.size() * 4));
  }
  ~DevTiles() {
    for (void* b : bufs) cudaFree(b);
  }
};

// Host replay of one kind's rounds for thread `tid` of the warpgroup (the quad's shuffles need its
// neighbours, so all 128 threads are replayed together).
static void replay(int kind, const PipeParams& pp, std::vector<std::vector<double>>& x, std::vector<std::array<double, 2>>& m) {
  for (int r = 0; r < pp.rounds; ++r) {
    if (kind == kEx2) {
      for (auto& v : x)
        for (auto& e : v) e = std::exp2(-e);
    } else if (kind == kRowMax || kind == kRowSum) {
      std::vector<std::array<float, 2>> part(128);
      for (int t = 0; t < 128; ++t)
        for (int h = 0; h < 2; ++h) {
          float a = kind == kRowMax ? float(m[t][h]) : std::fma(float(m[t][h]), 0.f, float(x[t][half_idx(h, 0)]));
          for (int k = kind == kRowMax ? 0 : 1; k < 32; ++k)
            a = kind == kRowMax ? std::fmax(a, float(x[t][half_idx(h, k)])) : a + float(x[t][half_idx(h, k)]);
          part[t][h] = a;
        }
      for (int stage : {1, 2}) {
        auto prev = part;
        for (int t = 0; t < 128; ++t)
          for (int h = 0; h < 2; ++h) {
            const float o = prev[t ^ stage][h];
            part[t][h] = kind == kRowMax ? std::fmax(prev[t][h], o) : prev[t][h] + o;
          }
      }
      for (int t = 0; t < 128; ++t)
        for (int h = 0; h < 2; ++h)
          m[t][h] = kind == kRowMax ? std::fmax(float(m[t][h]), part[t][h] * pp.one)
                                    : std::fma(float(m[t][h]), pp.half, part[t][h]);
    } else if (kind == kRescale) {
      for (auto& v : x)
        for (int i = 0; i < 64; ++i) v[i] = float(v[i]) * ((i & 2) ? pp.shrink : pp.one);
    } else if (kind == kCast) {
      for (auto& v : x)
        for (int j = 0; j < 32; ++j) {
          const uint32_t bits = uint32_t(h_f16(float(v[j]))) | (uint32_t(h_f16(pp.hi)) << 16);
          float f;
          std::memcpy(&f, &bits, 4);
          v[j] = f;
        }
    }
  }
}

// Largest relative error of warpgroup `wg`'s values in `out` against the host replay.
static double check_kind(int kind, const PipeParams& pp, const std::vector<float>& out, int wg) {
  std::vector<std::vector<double>> x(128, std::vector<double>(64));
  std::vector<std::array<double, 2>> m(128, {0.0, 0.0});
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 64; ++i) x[t][i] = init_value(kind, t, i);
  replay(kind, pp, x, m);
  double worst = 0;
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < 66; ++i) {
      const double ref = i < 64 ? x[t][i] : m[t][i - 64];
      const double v = out[(wg * 128 + t) * 66 + i];
      const double err = std::isfinite(v) ? std::fabs(v - ref) / std::max(std::fabs(ref), 1e-30) : INFINITY;
      worst = std::max(worst, err);
    }
  }
  return worst;
}

// A 64 x 128 accumulator's reference: S = Q[64..127].K^T (qk) or O = P0.V.
static std::vector<double> acc_ref(const HostTiles& h, bool qk) {
  std::vector<double> ref(64 * 128);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 128; ++c) {
      double a = 0;
      for (int kk = 0; kk < 128; ++kk)
        a += qk ? double(h.qf[(64 + r) * kCols + kk]) * h.kf[c * kCols + kk]
                : double(h.p0f[r * kCols + kk]) * h.vtf[c * kCols + kk];
      ref[r * 128 + c] = a;
    }
  return ref;
}

// Largest error of an accumulator in wgmma layout (thread t's 64 values at vals[t * stride + i]),
// relative to the reference's largest magnitude; a NaN (the poisoned output) is an infinite error.
static double acc_err(const std::vector<double>& ref, const float* vals, int stride) {
  double worst = 0, maxref = 0;
  for (double e : ref) maxref = std::max(maxref, std::fabs(e));
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 64; ++i) {
      const double v = vals[t * stride + i], r = ref[acc_row(t / 32, t % 32, i) * 128 + acc_col(t % 32, i)];
      worst = std::max(worst, std::isfinite(v) ? std::fabs(v - r) : INFINITY);
    }
  return worst / std::max(maxref, 1e-30);
}

// The partner's accumulators: S = Q[64..127].K^T and O = P0.V, or O = S too when it issues SS only
// (each commit group recomputes both).
static double check_partner(const HostTiles& h, const std::vector<float>& out, bool ss_only, bool second_only) {
  const double second = acc_err(acc_ref(h, ss_only), out.data() + 2 * 128 * 66, 64);
  return second_only ? second : std::max(acc_err(acc_ref(h, true), out.data() + 128 * 66, 66), second);
}

// Worst per-row relative L2 error of O / l against fp64 attention of one KV block.
static double check_attention(const HostTiles& h, const std::vector<float>& out, float scale_log2, int rows) {
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<double> sc(kCols);
    double mxv = -INFINITY, den = 0;
    for (int c = 0; c < kCols; ++c) {
      double a = 0;
      for (int kk = 0; kk < kCols; ++kk) a += double(h.qf[r * kCols + kk]) * h.kf[c * kCols + kk];
      sc[c] = a * scale_log2;
      mxv = std::max(mxv, sc[c]);
    }
    for (auto& e : sc) {
      e = std::exp2(e - mxv);
      den += e;
    }
    double num = 0, nrm = 0;
    for (int d = 0; d < kCols; ++d) {
      double ref = 0;
      for (int c = 0; c < kCols; ++c) ref += sc[c] * h.vtf[d * kCols + c];
      ref /= den;
      const double v = out[r * kCols + d];
      num += std::isfinite(v) ? (v - ref) * (v - ref) : INFINITY;
      nrm += ref * ref;
    }
    worst = std::max(worst, std::sqrt(num / std::max(nrm, 1e-30)));
  }
  return worst;
}

template <int KIND, int MODE>
static void run_kind(Report& report, const HostTiles& h, const DevTiles& d, int rounds, int launches) {
  const int sms = sm_count();
  auto kernel = wg_pipe_kernel<KIND, MODE>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  const PipeParams pp{rounds, -1.f, 0.f, 0.5f, 0.99999994f, 1.f, 1.875f};
  const int outn = kPipeOutFloats;
  float* dout = nullptr;
  PipeOut* dt = nullptr;
  CK(cudaMalloc(&dout, sizeof(float) * outn));
  CK(cudaMalloc(&dt, sizeof(PipeOut) * sms));
  std::vector<double> cyc, mhz, mma, own_mma, own_issue, own_step, stsm;
  double worst = 0, partner = 0, own = 0, stsm_bad = 0;
  bool ok = true;
  std::vector<uint32_t> ids;
  for (int l = 0; l <= launches; ++l) {
    CK(cudaMemset(dout, 0xFF, sizeof(float) * outn));
    CK(cudaMemset(dt, 0, sizeof(PipeOut) * sms));
    kernel<<<sms, threads_of(MODE), kOneCtaPerSmSmem>>>(d.t, pp, dout, dt);
    CK_LAUNCH();
    std::vector<float> out(outn);
    std::vector<PipeOut> t(sms);
    CK(cudaMemcpy(out.data(), dout, sizeof(float) * outn, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t.data(), dt, sizeof(PipeOut) * sms, cudaMemcpyDeviceToHost));
    for (int wg = 0; wg < steps_of(MODE); ++wg) worst = std::max(worst, check_kind(KIND, pp, out, wg));
    if (has_partner(MODE))
      partner = std::max(partner, check_partner(h, out, MODE == kBesideSS || MODE == kBesideStsmWgmma ||
                                                        MODE == kPairBeside || MODE == kBesideWaiting,
                                                steps_of(MODE) == 2));
    if (has_own(MODE)) own = std::max(own, acc_err(acc_ref(h, MODE != kOwnRS), out.data() + kOwnSlot, 64));
    if (has_stsm(MODE))
      for (int t = 0; t < 128; ++t) {  // a NaN (the poisoned slot: the stream never reported) is a failure
        const double v = out[kStsmSlot + t];
        stsm_bad = std::max(stsm_bad, std::isfinite(v) ? v : INFINITY);
      }
    if (l == 0) continue;  // warm-up
    ids.clear();
    for (const auto& x : t) {
      for (int wg = 0; wg < steps_of(MODE); ++wg) cyc.push_back(double(x.cycles[wg]) / rounds);
      if (x.ns) mhz.push_back(1e3 * double(x.cycles[0]) / double(x.ns));
      if (has_partner(MODE) && x.partner_cycles)
        mma.push_back(double(x.partner_groups) * 16 * 2.0 * 64 * 128 * 16 / double(x.partner_cycles));
      if (has_stsm(MODE) && x.stsm_cycles) stsm.push_back(double(x.stsm_rounds) * kStsmBytes / double(x.stsm_cycles));
      if (has_own(MODE) && x.own_groups) {  // 8 wgmma m64n128k16 per group, over the step's whole time
        own_mma.push_back(double(x.own_groups) * 8 * 2.0 * 64 * 128 * 16 / double(x.cycles[0]));
        own_issue.push_back(double(x.own_issue_cycles) / double(x.own_groups));
        own_step.push_back(double(x.own_step_cycles) / double(x.own_groups));
      }
      ids.push_back(x.smid);
    }
  }
  const double tol = KIND == kEx2 ? 1e-4 : 0.0;
  ok = worst <= tol && partner <= 1e-3 && own <= 1e-3 && stsm_bad == 0 && !read_and_clear_error_flags();
  std::sort(ids.begin(), ids.end());
  const Stats sc = stats_of(cyc);
  Record r;
  r.str("kind", "step").str("step", kKindName[KIND]).str("shape", kKindShape[KIND]).str("mode", kModeName[MODE])
      .integer("warps_per_subpartition", steps_of(MODE)).integer("rounds", rounds).integer("launches", launches)
      .integer("elements_per_round", kKindElems[KIND]).boolean("ok", ok).num("max_rel_err", worst)
      .boolean("one_cta_per_sm", std::adjacent_find(ids.begin(), ids.end()) == ids.end())
      .stats("cycles_per_round", sc).stats("sm_clock_mhz", stats_of(mhz));
  if (has_partner(MODE)) r.num("partner_max_rel_err", partner).stats("partner_flops_per_clk", stats_of(mma));
  if (has_stsm(MODE)) r.num("stsm_wrong_words", stsm_bad).stats("stsm_bytes_per_clk", stats_of(stsm));
  if (has_own(MODE))
    r.num("own_max_rel_err", own).stats("own_flops_per_clk", stats_of(own_mma))
        .stats("own_issue_cycles_per_group", stats_of(own_issue)).stats("step_cycles_per_round", stats_of(own_step));
  // kOwn*: the round also waits for the own group, so the step's rate is read from its own cycles
  const double step_cycles = has_own(MODE) ? stats_of(own_step).median : sc.median;
  if (ok) r.num("cycles", step_cycles).num("elements_per_clk", kKindElems[KIND] / step_cycles);
  report.add(r);
  CK(cudaFree(dout));
  CK(cudaFree(dt));
}

template <int KIND>
static void run_kind_all(Report& report, const HostTiles& h, const DevTiles& d, int rounds, int launches) {
  run_kind<KIND, kAlone>(report, h, d, rounds, launches);
  run_kind<KIND, kBeside>(report, h, d, rounds, launches);
  run_kind<KIND, kPair>(report, h, d, rounds, launches);
  run_kind<KIND, kBesideSS>(report, h, d, rounds, launches);
  run_kind<KIND, kBesideStsm>(report, h, d, rounds, launches);
  run_kind<KIND, kBesideStsmWgmma>(report, h, d, rounds, launches);
  run_kind<KIND, kPairBeside>(report, h, d, rounds, launches);
  // Beside the warpgroup's own wgmmas only the steps longer than a few dozen instructions: the rescale and
  // cast rounds (71 and 69 cycles alone) lie far inside one own group (512 busy cycles), and ptxas then
  // replaces a wgmma of the loop by a dummy (run_suite.py rejects the build).
  if constexpr (KIND == kEx2 || KIND == kRowMax || KIND == kRowSum) {
    run_kind<KIND, kOwnSS>(report, h, d, rounds, launches);
    run_kind<KIND, kOwnRS>(report, h, d, rounds, launches);
    run_kind<KIND, kOwnBeside>(report, h, d, rounds, launches);
  }
}

// One launch of a two-step kernel (cross_kernel, stagger_kernel) on NaN-poisoned output: the output and per-CTA times.
struct TwoStepBuffers {
  float* out = nullptr;
  CrossOut* times = nullptr;
  int sms = sm_count();
  TwoStepBuffers() {
    CK(cudaMalloc(&out, sizeof(float) * kPipeOutFloats));
    CK(cudaMalloc(&times, sizeof(CrossOut) * sms));
  }
  ~TwoStepBuffers() {
    CK(cudaFree(out));
    CK(cudaFree(times));
  }
  template <class Launch>
  std::pair<std::vector<float>, std::vector<CrossOut>> run(Launch launch) {
    CK(cudaMemset(out, 0xFF, sizeof(float) * kPipeOutFloats));
    CK(cudaMemset(times, 0, sizeof(CrossOut) * sms));
    launch(out, times);
    CK_LAUNCH();
    std::vector<float> o(kPipeOutFloats);
    std::vector<CrossOut> t(sms);
    CK(cudaMemcpy(o.data(), out, sizeof(float) * o.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t.data(), times, sizeof(CrossOut) * sms, cudaMemcpyDeviceToHost));
    return {o, t};
  }
};

// Two different steps at once (cross_kernel): each warpgroup's cycles per round while the other runs, both checked
// against the host replay of the rounds they ran, the partner's S against the host's Q.K^T.
template <int K0, int K1, bool BESIDE>
static void run_cross(Report& report, const HostTiles& h, const DevTiles& d, int rounds, int launches) {
  auto kernel = cross_kernel<K0, K1, BESIDE>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  const PipeParams pp{rounds, -1.f, 0.f, 0.5f, 0.99999994f, 1.f, 1.875f};
  TwoStepBuffers buf;
  std::vector<double> cyc[2], mma;
  double worst = 0, partner = 0;
  for (int l = 0; l <= launches; ++l) {
    const auto [out, t] = buf.run([&](float* o, CrossOut* ts) {
      kernel<<<buf.sms, BESIDE ? 384 : 256, kOneCtaPerSmSmem>>>(d.t, pp, o, ts);
    });
    for (int wg = 0; wg < 2; ++wg) {
      PipeParams ran = pp;
      ran.rounds = int(t[0].rounds_done[wg]);
      worst = std::max(worst, check_kind(wg == 0 ? K0 : K1, ran, out, wg));
    }
    if (BESIDE) partner = std::max(partner, acc_err(acc_ref(h, true), out.data() + 2 * 128 * 66, 64));
    if (l == 0) continue;
    for (const auto& x : t) {
      for (int wg = 0; wg < 2; ++wg) cyc[wg].push_back(double(x.cycles[wg]) / std::max(1u, x.rounds_done[wg]));
      if (BESIDE && x.partner_cycles)
        mma.push_back(double(x.partner_groups) * 16 * 2.0 * 64 * 128 * 16 / double(x.partner_cycles));
    }
  }
  const double tol = (K0 == kEx2 || K1 == kEx2) ? 1e-4 : 0.0;
  const bool ok = worst <= tol && partner <= 1e-3 && !read_and_clear_error_flags();
  Record r;
  r.str("kind", "cross").str("step", kKindName[K0]).str("other", kKindName[K1])
      .str("mode", BESIDE ? "cross_beside_wgmma" : "cross").integer("rounds", rounds).integer("launches", launches)
      .boolean("ok", ok).num("max_rel_err", worst).stats("cycles_per_round", stats_of(cyc[0]))
      .stats("other_cycles_per_round", stats_of(cyc[1]));
  if (BESIDE) r.num("partner_max_rel_err", partner).stats("partner_flops_per_clk", stats_of(mma));
  if (ok) r.num("cycles", stats_of(cyc[0]).median).num("other_cycles", stats_of(cyc[1]).median);
  report.add(r);
}

template <int K0, int K1>
static void run_cross_both(Report& report, const HostTiles& h, const DevTiles& d, int rounds, int launches) {
  run_cross<K0, K1, false>(report, h, d, rounds, launches);
  run_cross<K0, K1, true>(report, h, d, rounds, launches);
}

// Staggered starts (stagger_kernel): each warpgroup's cycles per round for each delay of warpgroup 1's start.
template <int K0, int K1>
static void run_stagger(Report& report, const DevTiles& d, int rounds, int launches) {
  auto kernel = stagger_kernel<K0, K1>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  const PipeParams pp{rounds, -1.f, 0.f, 0.5f, 0.99999994f, 1.f, 1.875f};
  TwoStepBuffers buf;
  for (int delay : {0, 64, 128, 192, 256, 384, 512, 768}) {
    std::vector<double> cyc[2];
    double worst = 0;
    for (int l = 0; l <= launches; ++l) {
      const auto [out, t] = buf.run([&](float* o, CrossOut* ts) {
        kernel<<<buf.sms, 256, kOneCtaPerSmSmem>>>(pp, delay, o, ts);  // the shared memory keeps one CTA per SM
      });
      for (int wg = 0; wg < 2; ++wg) worst = std::max(worst, check_kind(wg == 0 ? K0 : K1, pp, out, wg));
      if (l == 0) continue;
      for (const auto& x : t)
        for (int wg = 0; wg < 2; ++wg) cyc[wg].push_back(double(x.cycles[wg]) / rounds);
    }
    const double tol = (K0 == kEx2 || K1 == kEx2) ? 1e-4 : 0.0;
    const bool ok = worst <= tol && !read_and_clear_error_flags();
    Record r;
    r.str("kind", "stagger").str("step", kKindName[K0]).str("other", kKindName[K1]).integer("delay", delay)
        .integer("rounds", rounds).boolean("ok", ok).num("max_rel_err", worst)
        .stats("cycles_per_round", stats_of(cyc[0])).stats("other_cycles_per_round", stats_of(cyc[1]));
    if (ok) r.num("cycles", stats_of(cyc[0]).median).num("other_cycles", stats_of(cyc[1]).median);
    report.add(r);
  }
}

template <bool kPingPong, bool kStamp>
static void run_loop(Report& report, const HostTiles& h, const DevTiles& d, int n, int launches) {
  const int sms = sm_count(), wgs = kPingPong ? 2 : 1;
  auto kernel = fa_loop_kernel<kPingPong, kStamp>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  const float scale = float(1.0 / std::sqrt(128.0) * 1.4426950408889634);
  float* dout = nullptr;
  LoopOut* dt = nullptr;
  CK(cudaMalloc(&dout, sizeof(float) * kRows * kCols));
  CK(cudaMalloc(&dt, sizeof(LoopOut) * sms));
  std::vector<double> cyc, mhz, parts[5];
  double worst = 0;
  std::vector<uint32_t> ids;
  for (int l = 0; l <= launches; ++l) {
    CK(cudaMemset(dout, 0xFF, sizeof(float) * kRows * kCols));
    CK(cudaMemset(dt, 0, sizeof(LoopOut) * sms));
    kernel<<<sms, 128 * wgs, kOneCtaPerSmSmem>>>(d.t, n, scale, dout, dt);
    CK_LAUNCH();
    std::vector<float> out(kRows * kCols);
    std::vector<LoopOut> t(sms);
    CK(cudaMemcpy(out.data(), dout, sizeof(float) * out.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t.data(), dt, sizeof(LoopOut) * sms, cudaMemcpyDeviceToHost));
    worst = std::max(worst, check_attention(h, out, scale, 64 * wgs));
    if (l == 0) continue;  // warm-up
    ids.clear();
    for (const auto& x : t) {
      for (int w = 0; w < wgs; ++w) {
        cyc.push_back(double(x.cycles[w]) / n);
        if (kStamp)
          for (int j = 0; j < 5; ++j) parts[j].push_back(double(x.stamps[w][j]) / n);
      }
      if (x.ns) mhz.push_back(1e3 * double(x.cycles[0]) / double(x.ns));
      ids.push_back(x.smid);
    }
  }
  std::sort(ids.begin(), ids.end());
  const bool ok = worst <= 4e-3 && !read_and_clear_error_flags();
  const Stats sc = stats_of(cyc);
  Record r;
  r.str("kind", "consumer_loop")
      .str("schedule", kPingPong ? "two consumers taking tensor-core turns (fa_opt)" : "one consumer alone")
      .integer("warpgroups", wgs).integer("kv_steps", n).integer("launches", launches).boolean("stamped", kStamp)
      .boolean("ok", ok).num("max_rel_l2_err", worst)
      .boolean("one_cta_per_sm", std::adjacent_find(ids.begin(), ids.end()) == ids.end())
      .stats("cycles_per_step", sc).stats("sm_clock_mhz", stats_of(mhz));
  if (ok) r.num("cycles", sc.median);
  if (ok && kStamp) {
    static const char* names[5] = {"alpha_rescale_cast", "turn_wait", "wgmma_issue", "issue_to_wait",
                                   "rowmax_to_exp"};
    for (int j = 0; j < 5; ++j) r.stats(std::string("stamp_") + names[j], stats_of(parts[j]));
  }
  report.add(r);
  CK(cudaFree(dout));
  CK(cudaFree(dt));
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "fa_consumer.json";
  Report report("fa_consumer");
  report.clock_probe("start");
  std::mt19937 rng(2121);
  const HostTiles h = make_tiles(rng);
  const DevTiles d(h);
  const int rounds = 512, launches = 3;
  const auto finish = [&] {
    report.clock_probe("end");
    report.write(out_path);
    return 0;
  };
  // `fa_consumer OUT cross`: the cross pairs only; `fa_consumer OUT stagger`: the staggered starts only (session 70)
  const bool cross_only = argc > 2 && std::string(argv[2]) == "cross";
  if (argc > 2 && std::string(argv[2]) == "waiting") {  // the steps beside a partner that waits out its groups
    run_kind<kEx2, kBesideSS>(report, h, d, rounds, launches);
    run_kind<kEx2, kBesideWaiting>(report, h, d, rounds, launches);
    run_kind<kRowMax, kBesideSS>(report, h, d, rounds, launches);
    run_kind<kRowMax, kBesideWaiting>(report, h, d, rounds, launches);
    run_kind<kRowSum, kBesideSS>(report, h, d, rounds, launches);
    run_kind<kRowSum, kBesideWaiting>(report, h, d, rounds, launches);
    run_kind<kRescale, kBesideWaiting>(report, h, d, rounds, launches);
    run_kind<kCast, kBesideWaiting>(report, h, d, rounds, launches);
    return finish();
  }
  if (argc > 2 && std::string(argv[2]) == "stagger") {
    run_stagger<kEx2, kEx2>(report, d, 256, launches);
    run_stagger<kEx2, kRowMax>(report, d, 256, launches);
    run_stagger<kRowMax, kEx2>(report, d, 256, launches);
    run_stagger<kRowSum, kEx2>(report, d, 256, launches);
    run_stagger<kRowMax, kRowSum>(report, d, 256, launches);
    return finish();
  }
  run_cross_both<kEx2, kRowMax>(report, h, d, rounds, launches);
  run_cross_both<kEx2, kRowSum>(report, h, d, rounds, launches);
  run_cross_both<kEx2, kRescale>(report, h, d, rounds, launches);
  run_cross_both<kEx2, kCast>(report, h, d, rounds, launches);
  run_cross_both<kRowMax, kRowSum>(report, h, d, rounds, launches);
  run_cross_both<kRowMax, kRescale>(report, h, d, rounds, launches);
  run_cross_both<kRowMax, kCast>(report, h, d, rounds, launches);
  run_cross_both<kRowSum, kRescale>(report, h, d, rounds, launches);
  run_cross_both<kRowSum, kCast>(report, h, d, rounds, launches);
  run_cross_both<kRescale, kCast>(report, h, d, rounds, launches);
  if (cross_only) {
    return finish();
  }
  run_kind_all<kEx2>(report, h, d, rounds, launches);
  run_kind_all<kRowMax>(report, h, d, rounds, launches);
  run_kind_all<kRowSum>(report, h, d, rounds, launches);
  run_kind_all<kRescale>(report, h, d, rounds, launches);
  run_kind_all<kCast>(report, h, d, rounds, launches);
  const int steps = 256;
  run_loop<false, false>(report, h, d, steps, launches);
  run_loop<true, false>(report, h, d, steps, launches);
  run_loop<false, true>(report, h, d, steps, launches);
  run_loop<true, true>(report, h, d, steps, launches);
  return finish();
}
