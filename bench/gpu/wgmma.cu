// wgmma m64nNk16 (k32 for fp8) on Hopper: issue-to-complete latency of one instruction and the
// sustained rate of back-to-back instructions into one accumulator, with A from shared memory (SS)
// or from registers (RS), and with one or two warpgroups issuing on the same SM.
//
// Check: every launch computes D = 8 * A * B (the first wgmma of each group of 8 overwrites D) from
// small multiples of 1/8, exact in every input type and in FP32, and every output element of CTA 0
// is compared with a host matmul. A config whose result is wrong reports no time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>
#include <random>

#include "common.cuh"
#include "wgmma_ops.cuh"

constexpr int kGroup = 8;  // wgmmas per commit group; the first of each group has scale-d = 0


// Shared-memory matrix descriptor, no swizzle: start address, leading byte offset (between the two
// 16-byte core matrices along K), stride byte offset (between 8-row groups); PTX ISA 9.7.15.5.1.2.
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((saddr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

// Byte (r, c) of a K-major tile with 32-byte rows, in 8-row x 16-byte core matrices.
__host__ __device__ __forceinline__ int core_offset(int r, int c) {
  return ((r / 8) * 2 + (c / 16)) * 128 + (r % 8) * 16 + (c % 16);
}

template <int N, int DT, bool RS>
__global__ void __launch_bounds__(256, 1)
    wgmma_kernel(const uint8_t* __restrict__ a_rm, const uint8_t* __restrict__ b_rm, int iters, int mode,
                 uint32_t lbo, uint32_t sbo, int keep, float* __restrict__ d_out, CtaTime* __restrict__ times) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sa = smem;         // A: 64 rows x 32 bytes
  uint8_t* sb = smem + 2048;  // B: N rows x 32 bytes (K-major, i.e. B transposed)
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * 32; i += blockDim.x) sa[core_offset(i / 32, i % 32)] = a_rm[i];
  for (int i = tid; i < N * 32; i += blockDim.x) sb[core_offset(i / 32, i % 32)] = b_rm[i];
  fence_proxy_async_smem();  // ordinary stores, read next by the tensor cores (async proxy)
  __syncthreads();

  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4 + 16 * warp, t = lane % 4;
  uint32_t a_frag[4] = {0, 0, 0, 0};
  if (RS) {
    // Register fragment of A (PTX ISA, wgmma .m64nNk16 / .m64nNk32 A layouts): register j holds the
    // 4 bytes at row g + 8*(j&1), byte column 4t + 16*(j>>1), for 16-bit and 8-bit types alike.
#pragma unroll
    for (int j = 0; j < 4; ++j)
      a_frag[j] = *reinterpret_cast<const uint32_t*>(a_rm + (g + 8 * (j & 1)) * 32 + 4 * t + 16 * (j >> 1));
  }
  const uint64_t desc_a = make_desc(smem_addr(sa), lbo, sbo), desc_b = make_desc(smem_addr(sb), lbo, sbo);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  __syncthreads();

  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  if (mode == 0) {
    // Latency: issue one wgmma and wait for it before the next.
    for (int it = 0; it < iters; ++it) {
      wg_fence();
      if (RS)
        wgmma_rs<N, DT>(d, a_frag, desc_b, ((it % kGroup) != 0) | keep);
      else
        wgmma_ss<N, DT>(d, desc_a, desc_b, ((it % kGroup) != 0) | keep);
      wg_commit();
      wg_wait<0>();
      fence_operands(d);
    }
  } else {
    // Throughput: groups of kGroup back-to-back wgmmas into one accumulator, one group in flight.
    for (int it = 0; it < iters; it += kGroup) {
      wg_fence();
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        // `keep` is 0 at run time; were the compiler to know that, it would drop every group but the
        // last as dead (their results are overwritten), which is what ptxas does with a constant.
        if (RS)
          wgmma_rs<N, DT>(d, a_frag, desc_b, (u != 0) | keep);
        else
          wgmma_ss<N, DT>(d, desc_a, desc_b, (u != 0) | keep);
      }
      wg_commit();
      wg_wait<1>();
    }
    wg_wait<0>();
    fence_operands(d);
  }
  __syncthreads();
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (tid == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
  if (blockIdx.x == 0) {
    // Accumulator layout: d[i] is row 16*warp + g + 8*((i>>1)&1), column 8*(i>>2) + 2t + (i&1).
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const int row = 16 * warp + lane / 4 + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
      d_out[(wg * 64 + row) * N + col] = d[i];
    }
  }
}

static const char* kTypeName[3] = {"fp16", "bf16", "fp8_e4m3"};

// Encodes the value v (a multiple of 1/8 in [-2, 2], exact in all three types) as `dt`.
static void encode(int dt, float v, uint8_t* dst) {
  if (dt == 0) {
    __half h = __float2half_rn(v);
    std::memcpy(dst, &h, 2);
  } else if (dt == 1) {
    __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(dst, &h, 2);
  } else {
    __nv_fp8_e4m3 h(v);
    std::memcpy(dst, &h, 1);
  }
}

static float decode(int dt, const uint8_t* src) {
  if (dt == 0) {
    __half h;
    std::memcpy(&h, src, 2);
    return __half2float(h);
  }
  if (dt == 1) {
    __nv_bfloat16 h;
    std::memcpy(&h, src, 2);
    return __bfloat162float(h);
  }
  __nv_fp8_e4m3 h;
  std::memcpy(&h, src, 1);
  return float(h);
}

struct Inputs {
  std::vector<uint8_t> a, b;  // row-major, 32 bytes per row (K elements)
  std::vector<double> ref;    // 8 * A * B, 64 x N
  double tol = 0;             // largest accepted |D - ref| / max |ref|
};

// Exact inputs (multiples of 1/8 in [-2, 2]) or, with `random`, uniform values in [-1, 1] rounded to
// the type: full mantissas toggle the datapath as real data do (power, hence clock).
static Inputs make_inputs(int n, int dt, std::mt19937& rng, bool random = false) {
  const int esize = dt == 2 ? 1 : 2, k = 32 / esize;
  std::uniform_int_distribution<int> pick(-16, 16);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> av(64 * k), bv(n * k);
  Inputs in;
  in.a.resize(64 * 32);
  in.b.resize(n * 32);
  in.tol = random ? 1e-3 : (dt == 2 ? 1e-3 : 1e-6);
  for (int i = 0; i < 64 * k; ++i) {
    encode(dt, random ? uni(rng) : pick(rng) / 8.f, &in.a[i * esize]);
    av[i] = decode(dt, &in.a[i * esize]);
  }
  for (int i = 0; i < n * k; ++i) {
    encode(dt, random ? uni(rng) : pick(rng) / 8.f, &in.b[i * esize]);
    bv[i] = decode(dt, &in.b[i * esize]);
  }
  in.ref.assign(64 * n, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int kk = 0; kk < k; ++kk) s += double(av[m * k + kk]) * double(bv[j * k + kk]);
      in.ref[m * n + j] = kGroup * s;
    }
  return in;
}

struct Outcome {
  bool ok = false;
  double max_rel_err = 0;
  CtaSummary summary;
  uint32_t flags = 0;
};

template <int N, int DT, bool RS>
static Outcome run(const Inputs& in, int nwg, int iters, int mode, uint32_t lbo, uint32_t sbo, int launches) {
  const int sms = sm_count();
  auto kernel = wgmma_kernel<N, DT, RS>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  uint8_t *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  CtaTime* dt = nullptr;
  CK(cudaMalloc(&da, in.a.size()));
  CK(cudaMalloc(&db, in.b.size()));
  CK(cudaMalloc(&dd, sizeof(float) * 2 * 64 * N));
  CK(cudaMalloc(&dt, sizeof(CtaTime) * sms));
  CK(cudaMemcpy(da, in.a.data(), in.a.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, in.b.data(), in.b.size(), cudaMemcpyHostToDevice));
  Outcome out;
  out.ok = true;
  std::vector<CtaTime> all;
  for (int l = 0; l <= launches; ++l) {  // launch 0 warms up and is not timed
    CK(cudaMemset(dd, 0xFF, sizeof(float) * 2 * 64 * N));  // NaN poison: unwritten output fails
    kernel<<<sms, 128 * nwg, kOneCtaPerSmSmem>>>(da, db, iters, mode, lbo, sbo, 0, dd, dt);
    CK_LAUNCH();
    std::vector<float> h(2 * 64 * N);
    CK(cudaMemcpy(h.data(), dd, sizeof(float) * h.size(), cudaMemcpyDeviceToHost));
    double maxref = 0, maxerr = 0;
    for (int w = 0; w < nwg; ++w)
      for (int i = 0; i < 64 * N; ++i) {
        const double r = in.ref[i], v = h[w * 64 * N + i];
        maxref = std::max(maxref, std::fabs(r));
        maxerr = std::isfinite(v) ? std::max(maxerr, std::fabs(v - r)) : INFINITY;
      }
    const double rel = maxerr / std::max(maxref, 1e-30);
    out.max_rel_err = std::max(out.max_rel_err, rel);
    if (!(rel <= in.tol)) out.ok = false;
    std::vector<CtaTime> t(sms);
    CK(cudaMemcpy(t.data(), dt, sizeof(CtaTime) * sms, cudaMemcpyDeviceToHost));
    if (l > 0) all.insert(all.end(), t.begin(), t.end());
  }
  out.flags = read_and_clear_error_flags();
  if (out.flags) out.ok = false;
  out.summary = summarize(std::vector<CtaTime>(all.begin(), all.begin() + sms));
  const CtaSummary merged = summarize(all);
  out.summary.cycles = merged.cycles;
  out.summary.mhz = merged.mhz;
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dd));
  CK(cudaFree(dt));
  return out;
}

using Runner = Outcome (*)(const Inputs&, int, int, int, uint32_t, uint32_t, int);

template <int N, int DT>
static Runner runner(bool rs) {
  return rs ? &run<N, DT, true> : &run<N, DT, false>;
}

static Runner pick(int n, int dt, bool rs) {
  switch (n * 10 + dt) {
    case 640: return runner<64, 0>(rs);
    case 641: return runner<64, 1>(rs);
    case 642: return runner<64, 2>(rs);
    case 1280: return runner<128, 0>(rs);
    case 1281: return runner<128, 1>(rs);
    case 1282: return runner<128, 2>(rs);
    case 2560: return runner<256, 0>(rs);
    case 2561: return runner<256, 1>(rs);
    case 2562: return runner<256, 2>(rs);
  }
  std::fprintf(stderr, "no wgmma kernel for N=%d dtype=%d\n", n, dt);
  std::exit(5);
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "wgmma.json";
  Report report("wgmma");
  report.clock_probe("start");
  std::mt19937 rng(1234);

  // Which of the two readings of the no-swizzle descriptor offsets the hardware uses: a single
  // wgmma must reproduce the host matmul. The other reading computes a different product.
  uint32_t lbo = 0, sbo = 0;
  const uint32_t candidates[2][2] = {{128, 256}, {256, 128}};
  for (const auto& c : candidates) {
    Inputs in = make_inputs(64, 0, rng);
    Outcome o = pick(64, 0, false)(in, 1, kGroup, 0, c[0], c[1], 1);
    Record r;
    r.str("kind", "descriptor_probe").integer("lbo", c[0]).integer("sbo", c[1]).boolean("ok", o.ok)
        .num("max_rel_err", o.max_rel_err);
    report.add(r);
    if (o.ok) {
      lbo = c[0];
      sbo = c[1];
      break;
    }
  }
  if (!lbo) {
    std::fprintf(stderr, "wgmma: no descriptor layout reproduces the host matmul; no times reported\n");
    report.write(out_path);
    return 1;
  }

  const int ns[3] = {64, 128, 256};
  for (int n : ns)
    for (int dt = 0; dt < 3; ++dt)
      for (int rs = 0; rs < 2; ++rs) {
        Inputs in = make_inputs(n, dt, rng);
        Runner fn = pick(n, dt, rs);
        const int k = dt == 2 ? 32 : 16;
        const double flops = 2.0 * 64 * n * k;
        struct Mode {
          const char* name;
          int mode, nwg, iters;
        } modes[3] = {{"latency", 0, 1, 512}, {"throughput", 1, 1, 4096 * 256 / n}, {"throughput", 1, 2, 4096 * 256 / n}};
        for (const Mode& m : modes) {
          Outcome o = fn(in, m.nwg, m.iters, m.mode, lbo, sbo, 3);
          const double per_op = o.summary.cycles.median / m.iters;  // cycles per wgmma of one warpgroup
          Record r;
          r.str("kind", m.name).integer("n", n).integer("k", k).str("dtype", kTypeName[dt])
              .str("a_source", rs ? "RS" : "SS").integer("warpgroups", m.nwg).integer("iters", m.iters)
              .boolean("ok", o.ok).num("max_rel_err", o.max_rel_err).integer("error_flags", o.flags)
              .boolean("one_cta_per_sm", o.summary.distinct_sms).stats("cta_cycles", o.summary.cycles)
              .stats("sm_clock_mhz", o.summary.mhz);
          if (o.ok) {
            r.num("cycles_per_wgmma", per_op);
            if (m.mode == 1) {
              const double rate = m.nwg * m.iters * flops / o.summary.cycles.median;
              r.num("flops_per_clk_per_sm", rate).num("cycles_per_wgmma_per_sm", per_op / m.nwg);
            }
          }
          report.add(r);
        }
      }
  // Sustained clock: every SM's tensor cores busy for ~1 s (50 launches of ~20 ms), random data.
  {
    Inputs in = make_inputs(256, 0, rng, true);
    const int iters = 131072;
    Outcome o = pick(256, 0, false)(in, 2, iters, 1, lbo, sbo, 50);
    Record r;
    r.str("kind", "sustained").integer("n", 256).integer("k", 16).str("dtype", "fp16").str("a_source", "SS")
        .str("data", "uniform random in [-1, 1]").integer("warpgroups", 2).integer("iters", iters)
        .integer("launches", 50).boolean("ok", o.ok).num("max_rel_err", o.max_rel_err)
        .boolean("one_cta_per_sm", o.summary.distinct_sms).stats("cta_cycles", o.summary.cycles)
        .stats("sm_clock_mhz", o.summary.mhz);
    if (o.ok) r.num("flops_per_clk_per_sm", 2 * iters * 2.0 * 64 * 256 * 16 / o.summary.cycles.median);
    report.add(r);
  }
  report.clock_probe("end");
  report.write(out_path);
  return 0;
}
