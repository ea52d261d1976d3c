// How many wgmma instructions a warpgroup issues before the issue waits for the tensor core (issue 21,
// session 70): one warpgroup issues one commit group of C wgmma m64n128k16 fp16 (C = 1..16, SS or RS)
// with the tensor core idle (its previous group retired 1000 cycles earlier), timing the issue
// (wgmma.fence to the commit) and the completion (to wait_group 0 returning) on the SM clock; the same
// beside a second warpgroup that streams groups of 8 SS wgmmas, checking a stop flag between groups. If the tensor core takes
// at most Q instructions waiting or running, the issue of C > Q instructions runs at its pace (64 cycles
// per instruction of this shape), and the knee of issue cycles against C is Q (bench/kernel_replay.py's
// --tc-queue).
//
// Check: warpgroup 0's accumulator is C * A * B (the first wgmma overwrites it), the partner's 8 * A * B,
// from small multiples of 1/8, exact in fp16 and fp32, compared element by element with a host matmul
// for CTA 0 of every launch (NaN-poisoned output first). A config whose result is wrong reports no time.
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "common.cuh"
#include "wgmma_ops.cuh"

constexpr int kN = 128, kPartnerGroup = 8, kIdle = 1000;

// No-swizzle descriptor and K-major core-matrix layout, as wgmma.cu (whose descriptor probe fixed lbo/sbo).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) {
  return uint64_t((saddr >> 4) & 0x3FFF) | (uint64_t((128 >> 4) & 0x3FFF) << 16) | (uint64_t((256 >> 4) & 0x3FFF) << 32);
}
__host__ __device__ __forceinline__ int core_offset(int r, int c) {
  return ((r / 8) * 2 + (c / 16)) * 128 + (r % 8) * 16 + (c % 16);
}

struct Probe {
  uint64_t issue, done;  // summed over rounds: fence -> commit, fence -> wait_group 0 returned
  uint32_t smid, rounds;
};

template <int C, bool RS>
__global__ void __launch_bounds__(256, 1)
    queue_kernel(const uint8_t* __restrict__ a_rm, const uint8_t* __restrict__ b_rm, int rounds, int keep,
                 float* __restrict__ d_out, Probe* __restrict__ probe) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sa = smem;         // A: 64 rows x 32 bytes
  uint8_t* sb = smem + 2048;  // B: 128 rows x 32 bytes (K-major)
  volatile int* stop = reinterpret_cast<volatile int*>(smem + 2048 + kN * 32);
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  for (int i = tid; i < 64 * 32; i += blockDim.x) sa[core_offset(i / 32, i % 32)] = a_rm[i];
  for (int i = tid; i < kN * 32; i += blockDim.x) sb[core_offset(i / 32, i % 32)] = b_rm[i];
  if (tid == 0) *stop = 0;
  fence_proxy_async_smem();
  __syncthreads();
  const int g = lane / 4 + 16 * warp, t = lane % 4;
  uint32_t a_frag[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    a_frag[j] = *reinterpret_cast<const uint32_t*>(a_rm + (g + 8 * (j & 1)) * 32 + 4 * t + 16 * (j >> 1));
  const uint64_t desc_a = make_desc(smem_addr(sa)), desc_b = make_desc(smem_addr(sb));
  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = 0.f;

  if (wg == 0) {
    uint64_t issue = 0, done = 0, last = clock_cycles();
    for (int r = 0; r < rounds; ++r) {
      while (clock_cycles() - last < kIdle) {
      }
      const uint64_t t0 = clock_cycles();
      wg_fence();
#pragma unroll
      for (int u = 0; u < C; ++u) {
        if (RS)
          wgmma_rs<kN, 0>(d, a_frag, desc_b, (u != 0) | keep);
        else
          wgmma_ss<kN, 0>(d, desc_a, desc_b, (u != 0) | keep);
      }
      wg_commit();
      const uint64_t t1 = clock_cycles();
      wg_wait<0>();
      fence_operands(d);
      last = clock_cycles();
      issue += t1 - t0;
      done += last - t0;
    }
    *stop = 1;
    if (tid == 0) probe[blockIdx.x] = Probe{issue, done, sm_id(), uint32_t(rounds)};
  } else {
    // The stop flag read by thread 0 and shared (warpgroup_agrees): wgmma is .aligned, and a warp that left on its
    // own reading while the others issued one more group ended in "illegal instruction" (C = 10, session 70).
    while (!warpgroup_agrees(tid % 128, *stop != 0, stop[1])) {
      wg_fence();
#pragma unroll
      for (int u = 0; u < kPartnerGroup; ++u) wgmma_ss<kN, 0>(d, desc_a, desc_b, (u != 0) | keep);
      wg_commit();
      wg_wait<1>();
    }
    wg_wait<0>();
    fence_operands(d);
  }
  if (blockIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const int row = 16 * warp + lane / 4 + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
      d_out[(wg * 64 + row) * kN + col] = d[i];
    }
  }
}

struct Inputs {
  std::vector<uint8_t> a, b;
  std::vector<double> ab;  // A * B, 64 x 128
};

static Inputs make_inputs(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(-16, 16);
  std::vector<float> av(64 * 16), bv(kN * 16);
  Inputs in;
  in.a.resize(64 * 32);
  in.b.resize(kN * 32);
  for (int i = 0; i < 64 * 16; ++i) {
    __half h = __float2half_rn(pick(rng) / 8.f);
    std::memcpy(&in.a[2 * i], &h, 2);
    av[i] = __half2float(h);
  }
  for (int i = 0; i < kN * 16; ++i) {
    __half h = __float2half_rn(pick(rng) / 8.f);
    std::memcpy(&in.b[2 * i], &h, 2);
    bv[i] = __half2float(h);
  }
  in.ab.assign(64 * kN, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int j = 0; j < kN; ++j)
      for (int k = 0; k < 16; ++k) in.ab[m * kN + j] += double(av[m * 16 + k]) * double(bv[j * 16 + k]);
  return in;
}

struct Outcome {
  bool ok = true;
  double max_err = 0;
  Stats issue, done;
  bool distinct_sms = true;
};

template <int C, bool RS>
static Outcome run(const Inputs& in, bool partner, int rounds, int launches) {
  const int sms = sm_count(), nwg = partner ? 2 : 1;
  auto kernel = queue_kernel<C, RS>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  uint8_t *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  Probe* dp = nullptr;
  CK(cudaMalloc(&da, in.a.size()));
  CK(cudaMalloc(&db, in.b.size()));
  CK(cudaMalloc(&dd, sizeof(float) * 2 * 64 * kN));
  CK(cudaMalloc(&dp, sizeof(Probe) * sms));
  CK(cudaMemcpy(da, in.a.data(), in.a.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, in.b.data(), in.b.size(), cudaMemcpyHostToDevice));
  Outcome out;
  std::vector<double> issue, done;
  std::vector<uint32_t> ids;
  for (int l = 0; l <= launches; ++l) {  // launch 0 warms up and is not counted
    CK(cudaMemset(dd, 0xFF, sizeof(float) * 2 * 64 * kN));
    kernel<<<sms, 128 * nwg, kOneCtaPerSmSmem>>>(da, db, rounds, 0, dd, dp);
    CK_LAUNCH();
    std::vector<float> h(2 * 64 * kN);
    CK(cudaMemcpy(h.data(), dd, sizeof(float) * h.size(), cudaMemcpyDeviceToHost));
    for (int w = 0; w < nwg; ++w)
      for (int i = 0; i < 64 * kN; ++i) {
        const double ref = in.ab[i] * (w == 0 ? C : kPartnerGroup), v = h[w * 64 * kN + i];
        const double err = std::isfinite(v) ? std::fabs(v - ref) : INFINITY;
        out.max_err = std::max(out.max_err, err);
        if (!(err <= 1e-6 * std::max(1.0, std::fabs(ref)))) out.ok = false;
      }
    std::vector<Probe> p(sms);
    CK(cudaMemcpy(p.data(), dp, sizeof(Probe) * sms, cudaMemcpyDeviceToHost));
    if (l == 0) continue;
    for (const Probe& x : p) {
      issue.push_back(double(x.issue) / x.rounds);
      done.push_back(double(x.done) / x.rounds);
      if (l == 1) ids.push_back(x.smid);
    }
  }
  if (read_and_clear_error_flags()) out.ok = false;
  std::sort(ids.begin(), ids.end());
  out.distinct_sms = std::adjacent_find(ids.begin(), ids.end()) == ids.end();
  out.issue = stats_of(issue);
  out.done = stats_of(done);
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dd));
  CK(cudaFree(dp));
  return out;
}

using Runner = Outcome (*)(const Inputs&, bool, int, int);
template <int C>
static Runner runner(bool rs) {
  return rs ? &run<C, true> : &run<C, false>;
}
static Runner pick(int c, bool rs) {
  switch (c) {
    case 1: return runner<1>(rs);
    case 2: return runner<2>(rs);
    case 3: return runner<3>(rs);
    case 4: return runner<4>(rs);
    case 5: return runner<5>(rs);
    case 6: return runner<6>(rs);
    case 7: return runner<7>(rs);
    case 8: return runner<8>(rs);
    case 10: return runner<10>(rs);
    case 12: return runner<12>(rs);
    case 16: return runner<16>(rs);
  }
  std::fprintf(stderr, "no queue kernel for C=%d\n", c);
  std::exit(5);
}

// wgmma_queue OUT [PARTNER RS COUNT]: every config, or one (a device fault ends the process, so a driver can run
// the configs one process each and keep the others' records).
int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "wgmma_queue.json";
  Report report("wgmma_queue");
  report.clock_probe("start");
  std::mt19937 rng(70);
  const Inputs in = make_inputs(rng);
  const int counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};
  const bool one = argc > 4;
  for (int partner = 0; partner < 2; ++partner)
    for (int rs = 0; rs < 2; ++rs)
      for (int c : counts) {
        if (one && (partner != std::atoi(argv[2]) || rs != std::atoi(argv[3]) || c != std::atoi(argv[4]))) continue;
        const Outcome o = pick(c, rs)(in, partner, 256, 3);
        Record r;
        r.str("kind", "issue_queue").integer("count", c).str("shape", "m64n128k16 fp16")
            .str("a_source", rs ? "RS" : "SS").boolean("partner", partner).integer("rounds", 256)
            .boolean("ok", o.ok).num("max_abs_err", o.max_err).boolean("one_cta_per_sm", o.distinct_sms);
        if (o.ok) r.stats("issue_cycles", o.issue).stats("done_cycles", o.done)
                      .num("issue", o.issue.median).num("done", o.done.median);
        report.add(r);
      }
  report.clock_probe("end");
  report.write(out_path);
  return 0;
}
