// Per-SM throughput and dependent latency of the non-tensor pipes that softmax uses on Hopper:
// MUFU ex2 (ex2.approx.ftz.f32), FP32 FMA, FP32 max (FMNMX), and the FP32 -> FP16/BF16 pack
// (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32, SASS F2FP.*.PACK_AB), alone and in pairs: if two kinds of
// instruction share a pipe, a kernel issuing both takes the sum of their times, else the maximum.
//
// Every chain is a loop-carried recurrence (x <- f(x)), so no instruction is dead, and each
// thread's final values are recomputed on the host (exactly for FFMA, max and the packs, within
// 1e-5 for the approximate ex2). A kernel whose values differ reports no time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>

#include "common.cuh"

enum Op : int { kNone = 0, kEx2, kFfma, kFmnmx, kCvtF16, kCvtBf16 };
static const char* kOpName[] = {"none", "ex2", "ffma", "fmnmx", "cvt_f16x2", "cvt_bf16x2"};
constexpr int kIlp = 8;  // independent chains per thread and op kind
constexpr float kFmaA = 0.9375f, kFmaB = 0.0625f, kCvtHiF16 = 1.875f, kCvtHiBf16 = 1.0f;

// `hi` is the pack's constant upper half, passed in a register the compiler cannot rematerialise.
template <int OP, int ILP>
__device__ __forceinline__ void step(float (&x)[ILP], float hi) {
#pragma unroll
  for (int j = 0; j < ILP; ++j) {
    if constexpr (OP == kEx2) {
      asm volatile("{\n .reg .f32 t;\n neg.f32 t, %0;\n ex2.approx.ftz.f32 %0, t;\n}" : "+f"(x[j]));
    } else if constexpr (OP == kFfma) {
      asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(x[j]) : "f"(kFmaA), "f"(kFmaB));
    } else if constexpr (OP == kFmnmx) {
      const float y = ILP == 1 ? -x[0] : x[(j + 1) % ILP];  // one chain: x <- max(x, -x)
      asm volatile("max.f32 %0, %0, %1;" : "+f"(x[j]) : "f"(y));
    } else if constexpr (OP == kCvtF16) {
      uint32_t h;
      asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(hi), "f"(x[j]));
      x[j] = __uint_as_float(h);
    } else if constexpr (OP == kCvtBf16) {
      uint32_t h;
      asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(hi), "f"(x[j]));
      x[j] = __uint_as_float(h);
    }
  }
}

__host__ __device__ inline float initial_value(int op, uint32_t gtid, int j) {
  uint32_t h = gtid * 0x9E3779B1u ^ uint32_t(j + 1) * 0x85EBCA77u;
  h ^= h >> 16;
  const float u = float(h & 0xFFFF) / 65536.f;  // [0, 1)
  switch (op) {
    case kEx2: return 0.25f + 0.5f * u;
    case kFfma: return 4.f * u - 2.f;
    case kFmnmx: return u - 0.5f;
    default: return 1.f + u / 64.f;  // the packs
  }
}

// Op A on kIlp chains and op B (or none) on kIlp more, `iters` rounds.
template <int A, int B, int ILP>
__global__ void __launch_bounds__(1024, 1) pipe_kernel(int iters, const float* his, float* out, CtaTime* times) {
  const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;
  float x[ILP], y[ILP];
#pragma unroll
  for (int j = 0; j < ILP; ++j) {
    x[j] = initial_value(A, gtid, j);
    y[j] = initial_value(B, gtid, j + ILP);
  }
  // Loaded, not constant: ptxas would otherwise copy the constant into a register inside the loop.
  const float hi_a = his[A], hi_b = his[B];
  __syncthreads();
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  // One chain (latency) unrolls far enough that the loop's own branch adds well under 0.1 cycle per op.
#pragma unroll(ILP == 1 ? 64 : 8)
  for (int it = 0; it < iters; ++it) {
    step<A, ILP>(x, hi_a);
    if constexpr (B != kNone) step<B, ILP>(y, hi_b);
  }
  __syncthreads();
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (threadIdx.x == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
#pragma unroll
  for (int j = 0; j < ILP; ++j) {
    out[size_t(gtid) * 2 * ILP + j] = x[j];
    out[size_t(gtid) * 2 * ILP + ILP + j] = y[j];
  }
}

// ---- host reference of the same recurrences
static float host_step(int op, float v, const float* chains, int j, int ilp) {
  switch (op) {
    case kEx2: return std::exp2f(-v);
    case kFfma: return std::fmaf(v, kFmaA, kFmaB);
    case kFmnmx: return std::fmax(v, ilp == 1 ? -v : chains[(j + 1) % ilp]);
    case kCvtF16: {
      const uint16_t hi = __half_as_ushort(__float2half_rn(kCvtHiF16)), lo = __half_as_ushort(__float2half_rn(v));
      const uint32_t bits = (uint32_t(hi) << 16) | lo;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case kCvtBf16: {
      const __nv_bfloat16 hb = __float2bfloat16_rn(kCvtHiBf16), lb = __float2bfloat16_rn(v);
      uint16_t hi, lo;
      std::memcpy(&hi, &hb, 2);
      std::memcpy(&lo, &lb, 2);
      const uint32_t bits = (uint32_t(hi) << 16) | lo;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
  return v;
}

// Largest relative difference between the device's chains of thread `gtid` and the host's.
static double check_thread(int a, int b, int ilp, int iters, uint32_t gtid, const float* dev) {
  std::vector<float> x(ilp), y(ilp);
  for (int j = 0; j < ilp; ++j) {
    x[j] = initial_value(a, gtid, j);
    y[j] = initial_value(b, gtid, j + ilp);
  }
  for (int it = 0; it < iters; ++it) {
    for (int j = 0; j < ilp; ++j) x[j] = host_step(a, x[j], x.data(), j, ilp);
    if (b != kNone)
      for (int j = 0; j < ilp; ++j) y[j] = host_step(b, y[j], y.data(), j, ilp);
  }
  double worst = 0;
  for (int j = 0; j < ilp; ++j) {
    const double dx = std::fabs(double(dev[j]) - x[j]) / std::max(1e-30, std::fabs(double(x[j])));
    worst = std::max(worst, std::isfinite(dev[j]) ? dx : INFINITY);
    if (b != kNone) {
      const double dy = std::fabs(double(dev[ilp + j]) - y[j]) / std::max(1e-30, std::fabs(double(y[j])));
      worst = std::max(worst, std::isfinite(dev[ilp + j]) ? dy : INFINITY);
    }
  }
  return worst;
}

struct Result {
  bool ok = false;
  double max_rel_err = 0;
  CtaSummary summary;
  long long ops_per_cta = 0;  // instructions counted per thread x threads
};

template <int A, int B, int ILP>
static Result run(int grid, int threads, int iters) {
  auto kernel = pipe_kernel<A, B, ILP>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  const size_t n = size_t(grid) * threads * 2 * ILP;
  float* d_out = nullptr;
  float* d_his = nullptr;
  CtaTime* d_t = nullptr;
  const float his[6] = {0.f, 0.f, 0.f, 0.f, kCvtHiF16, kCvtHiBf16};
  CK(cudaMalloc(&d_his, sizeof(his)));
  CK(cudaMemcpy(d_his, his, sizeof(his), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&d_out, n * sizeof(float)));
  CK(cudaMalloc(&d_t, grid * sizeof(CtaTime)));
  std::vector<CtaTime> all;
  std::vector<float> h(n);
  for (int l = 0; l <= 3; ++l) {
    CK(cudaMemset(d_out, 0xFF, n * sizeof(float)));
    kernel<<<grid, threads, kOneCtaPerSmSmem>>>(iters, d_his, d_out, d_t);
    CK_LAUNCH();
    std::vector<CtaTime> t(grid);
    CK(cudaMemcpy(t.data(), d_t, grid * sizeof(CtaTime), cudaMemcpyDeviceToHost));
    if (l > 0) all.insert(all.end(), t.begin(), t.end());
  }
  CK(cudaMemcpy(h.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
  Result r;
  // Every thread of CTA 0 and 32 threads of the last CTA.
  std::vector<uint32_t> ids;
  for (int i = 0; i < threads; ++i) ids.push_back(i);
  for (int i = 0; i < std::min(32, threads); ++i) ids.push_back(uint32_t((grid - 1) * threads + i));
  for (uint32_t g : ids) r.max_rel_err = std::max(r.max_rel_err, check_thread(A, B, ILP, iters, g, &h[size_t(g) * 2 * ILP]));
  const double tol = (A == kEx2 || B == kEx2) ? 1e-5 : 0.0;
  r.ok = r.max_rel_err <= tol && read_and_clear_error_flags() == 0;
  r.summary = summarize(std::vector<CtaTime>(all.begin(), all.begin() + grid));
  const CtaSummary merged = summarize(all);
  r.summary.cycles = merged.cycles;
  r.summary.mhz = merged.mhz;
  r.ops_per_cta = (long long)threads * iters * ILP * (B == kNone ? 1 : 2);
  CK(cudaFree(d_out));
  CK(cudaFree(d_his));
  CK(cudaFree(d_t));
  return r;
}

static void add(Report& rep, const char* kind, int a, int b, int ilp, int grid, int threads, int iters,
                const Result& r) {
  Record rec;
  rec.str("kind", kind).str("op", kOpName[a]).str("with", kOpName[b]).integer("chains_per_thread", ilp)
      .integer("threads_per_cta", threads).integer("ctas", grid).integer("iters", iters).boolean("ok", r.ok)
      .num("max_rel_err", r.max_rel_err).boolean("one_cta_per_sm", r.summary.distinct_sms)
      .stats("cta_cycles", r.summary.cycles).stats("sm_clock_mhz", r.summary.mhz);
  if (r.ok) {
    if (std::string(kind) == "latency") {
      rec.num("cycles_per_op", r.summary.cycles.median / iters);
    } else {
      const double each = double(threads) * iters * ilp;  // instructions of op a (and of op b)
      rec.num("ops_per_clk_per_sm", r.ops_per_cta / r.summary.cycles.median)
          .num("op_a_per_clk_per_sm", each / r.summary.cycles.median);
    }
  }
  rep.add(rec);
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "pipes.json";
  Report rep("pipes");
  rep.clock_probe("start");
  const int sms = sm_count(), threads = 1024, iters = 2048;

  // Throughput, one op kind: 32 warps per SM, 8 independent chains per thread.
  add(rep, "throughput", kEx2, kNone, kIlp, sms, threads, iters, run<kEx2, kNone, kIlp>(sms, threads, iters));
  add(rep, "throughput", kFfma, kNone, kIlp, sms, threads, iters, run<kFfma, kNone, kIlp>(sms, threads, iters));
  add(rep, "throughput", kFmnmx, kNone, kIlp, sms, threads, iters, run<kFmnmx, kNone, kIlp>(sms, threads, iters));
  add(rep, "throughput", kCvtF16, kNone, kIlp, sms, threads, iters, run<kCvtF16, kNone, kIlp>(sms, threads, iters));
  add(rep, "throughput", kCvtBf16, kNone, kIlp, sms, threads, iters,
      run<kCvtBf16, kNone, kIlp>(sms, threads, iters));
  // Pairs: the same instruction counts issued together.
  add(rep, "pair", kEx2, kCvtF16, kIlp, sms, threads, iters, run<kEx2, kCvtF16, kIlp>(sms, threads, iters));
  add(rep, "pair", kEx2, kCvtBf16, kIlp, sms, threads, iters, run<kEx2, kCvtBf16, kIlp>(sms, threads, iters));
  add(rep, "pair", kEx2, kFfma, kIlp, sms, threads, iters, run<kEx2, kFfma, kIlp>(sms, threads, iters));
  add(rep, "pair", kCvtF16, kFfma, kIlp, sms, threads, iters, run<kCvtF16, kFfma, kIlp>(sms, threads, iters));
  add(rep, "pair", kCvtF16, kFmnmx, kIlp, sms, threads, iters, run<kCvtF16, kFmnmx, kIlp>(sms, threads, iters));
  add(rep, "pair", kFfma, kFmnmx, kIlp, sms, threads, iters, run<kFfma, kFmnmx, kIlp>(sms, threads, iters));
  // Dependent latency: one warp, one chain.
  const int lat_iters = 4096;
  add(rep, "latency", kEx2, kNone, 1, 1, 32, lat_iters, run<kEx2, kNone, 1>(1, 32, lat_iters));
  add(rep, "latency", kFfma, kNone, 1, 1, 32, lat_iters, run<kFfma, kNone, 1>(1, 32, lat_iters));
  add(rep, "latency", kFmnmx, kNone, 1, 1, 32, lat_iters, run<kFmnmx, kNone, 1>(1, 32, lat_iters));
  add(rep, "latency", kCvtF16, kNone, 1, 1, 32, lat_iters, run<kCvtF16, kNone, 1>(1, 32, lat_iters));
  rep.clock_probe("end");
  rep.write(out_path);
  return 0;
}
