// Synchronisation costs between warp groups on Hopper:
//
//   mbarrier round trip   warpgroup A signals B through an mbarrier (one arrival per warp), B waits
//                         and signals back; also thread to thread (one arrival, one waiter).
//   wait issue            mbarrier.try_wait on a phase that has already completed.
//   named barriers        bar.sync with 256 and 384 threads all arriving; and a ping-pong between two
//                         warpgroups through bar.arrive / bar.sync (FA3's pattern).
//   hand-off              registers -> shared memory -> registers between two warpgroups, with a
//                         full and an empty mbarrier, for 0 to 32 KiB per round.
//   setmaxnreg            dec/inc as FA3 uses them (producer 24, two consumers 240) and a dec+inc loop.
//
// Checks: every signal carries a token that the receiver compares with the round number (after it
// has answered, so the check is off the critical path); hand-off data are summed by the consumer and
// compared with the host's sum; named barriers are checked in a separate launch that exchanges data
// across each barrier. A failed check or a timed-out wait reports no time.
#include "common.cuh"

constexpr int kWg = 128;

__device__ uint32_t g_mismatches;

__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// ---------------------------------------------------------------------------------------------
// mbarrier ping-pong. mode 0: two warpgroups, each warp's lane 0 arrives after the warp has passed
// its wait (arrival count 4); every thread waits. mode 1: thread 0 and thread 32 only (count 1).
// poll 0: waits poll with try_wait (no suspend hint); 1: they spin on test_wait; 2: try_wait with
// CUTLASS's suspend hint (resumes when the phase completes instead of on a ~200-cycle poll grid).
// The poll is a template argument so that each kernel holds one wait loop: a run-time choice among
// three changed the code around the try_wait loop and moved the hand-off round trip by ~100 cycles.
template <int kPoll>
__device__ __forceinline__ bool wait_poll(uint32_t bar, uint32_t parity) {
  if constexpr (kPoll == 2) return mbar_wait_hint(bar, parity);
  else return mbar_wait<kPoll == 1>(bar, parity);
}
constexpr const char* kPollNames[3] = {"try_wait", "test_wait", "try_wait_hint"};

template <int kPoll>
__global__ void __launch_bounds__(256, 1) mbar_pingpong_kernel(int iters, int mode, CtaTime* times) {
  __shared__ __align__(8) uint64_t bars[2];
  __shared__ volatile uint32_t token[2][2];  // [direction][round parity]
  const int tid = threadIdx.x, lane = tid % 32;
  const uint32_t to_b = smem_addr(&bars[0]), to_a = smem_addr(&bars[1]);
  if (tid == 0) {
    mbar_init(to_b, mode == 0 ? 4 : 1);
    mbar_init(to_a, mode == 0 ? 4 : 1);
    mbar_fence_init();
  }
  __syncthreads();
  uint32_t bad = 0;
  const bool side_a = mode == 0 ? tid < kWg : tid == 0;
  const bool side_b = mode == 0 ? tid >= kWg : tid == 32;
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  if (side_a) {
    for (int i = 0; i < iters; ++i) {
      if (tid == 0) token[0][i & 1] = uint32_t(i);
      if (mode == 0) __syncwarp();
      if (lane == 0) mbar_arrive(to_b);
      if (!wait_poll<kPoll>(to_a, uint32_t(i & 1))) break;
      bad += token[1][i & 1] != uint32_t(i);
    }
  } else if (side_b) {
    for (int i = 0; i < iters; ++i) {
      if (!wait_poll<kPoll>(to_b, uint32_t(i & 1))) break;
      if (tid == kWg || mode == 1) token[1][i & 1] = uint32_t(i);
      if (mode == 0) __syncwarp();
      if (lane == 0) mbar_arrive(to_a);
      bad += token[0][i & 1] != uint32_t(i);
    }
  }
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (tid == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
  if (bad) atomicAdd(&g_mismatches, bad);
}

// A wait on a barrier whose phase 0 completed before the loop: the cost of a wait that finds its data.
__global__ void __launch_bounds__(32, 1) wait_issue_kernel(int iters, CtaTime* times, uint32_t* passed) {
  __shared__ __align__(8) uint64_t bar;
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    mbar_fence_init();
    mbar_arrive(b);
  }
  __syncwarp();
  uint32_t n = 0;
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  // Each wait branches on its result before the next is issued, as a consumer's wait loop does.
#pragma unroll 16
  for (int i = 0; i < iters; ++i) n += mbar_wait(b, 0);
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (threadIdx.x == 0) {
    times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
    *passed = n;
  }
}

// ---------------------------------------------------------------------------------------------
// Named barriers. mode 0: the first `n` threads bar.sync id 1 each round (check: each thread writes
// its slot, syncs, reads its neighbour's slot, syncs again). mode 1: ping-pong, warpgroup 0 waits on
// barrier 1 (released by warpgroup 1's bar.arrive) and answers on barrier 2.
__global__ void __launch_bounds__(384, 1) named_barrier_kernel(int iters, int n, int mode, int check, CtaTime* times) {
  __shared__ volatile uint32_t slot[384];
  __shared__ volatile uint32_t token[2][2];
  const int tid = threadIdx.x;
  uint32_t bad = 0;
  __syncthreads();
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  if (mode == 0 && tid < n) {
    if (check) {
      for (int i = 0; i < iters; ++i) {
        slot[tid] = uint32_t(i * 1000 + tid);
        named_sync(1, n);
        const int peer = (tid + 1) % n;
        bad += slot[peer] != uint32_t(i * 1000 + peer);
        named_sync(1, n);
      }
    } else {
#pragma unroll 8
      for (int i = 0; i < iters; ++i) named_sync(1, n);
    }
  } else if (mode == 1 && tid < 2 * kWg) {
    if (tid < kWg) {
      for (int i = 0; i < iters; ++i) {
        named_sync(1, 2 * kWg);
        if (check) bad += token[1][i & 1] != uint32_t(i);
        if (check && tid == 0) token[0][i & 1] = uint32_t(i);
        named_arrive(2, 2 * kWg);
      }
    } else {
      for (int i = 0; i < iters; ++i) {
        if (check && tid == kWg) token[1][i & 1] = uint32_t(i);
        named_arrive(1, 2 * kWg);
        named_sync(2, 2 * kWg);
        if (check) bad += token[0][i & 1] != uint32_t(i);
      }
    }
  }
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (tid == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
  if (bad) atomicAdd(&g_mismatches, bad);
}

// ---------------------------------------------------------------------------------------------
// Hand-off of WORDS 32-bit registers per thread from warpgroup 0 to warpgroup 1 through shared
// memory: producer waits `empty`, stores, arrives `full`; consumer waits `full`, loads, arrives
// `empty` (one arrival per warp, after __syncwarp). Round i carries i*WORDS + k + thread.
template <int WORDS, int kPoll>
__global__ void __launch_bounds__(256, 1) handoff_kernel(int iters, CtaTime* times, uint32_t* sums) {
  extern __shared__ __align__(16) uint32_t buf[];
  __shared__ __align__(8) uint64_t bars[2];
  const int tid = threadIdx.x, t = tid % kWg, lane = tid % 32;
  const uint32_t full = smem_addr(&bars[0]), empty = smem_addr(&bars[1]);
  if (tid == 0) {
    mbar_init(full, 4);
    mbar_init(empty, 4);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  if (tid < kWg) {
    for (int i = 0; i < iters; ++i) {
      if (i > 0 && !wait_poll<kPoll>(empty, uint32_t((i - 1) & 1))) break;
      uint32_t v[WORDS > 0 ? WORDS : 1];
#pragma unroll
      for (int k = 0; k < WORDS; ++k) v[k] = uint32_t(i * WORDS + k + t);
      if constexpr (WORDS % 4 == 0) {
#pragma unroll
        for (int k = 0; k < WORDS; k += 4)
          reinterpret_cast<uint4*>(buf)[(k / 4) * kWg + t] = make_uint4(v[k], v[k + 1], v[k + 2], v[k + 3]);
      } else if constexpr (WORDS % 2 == 0) {
#pragma unroll
        for (int k = 0; k < WORDS; k += 2) reinterpret_cast<uint2*>(buf)[(k / 2) * kWg + t] = make_uint2(v[k], v[k + 1]);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(full);
    }
    if (tid == 0) wait_poll<kPoll>(empty, uint32_t((iters - 1) & 1));
  } else {
    uint32_t sum = 0;
    for (int i = 0; i < iters; ++i) {
      if (!wait_poll<kPoll>(full, uint32_t(i & 1))) break;
      if constexpr (WORDS % 4 == 0) {
#pragma unroll
        for (int k = 0; k < WORDS; k += 4) {
          const uint4 x = reinterpret_cast<const uint4*>(buf)[(k / 4) * kWg + t];
          sum += x.x + x.y + x.z + x.w;
        }
      } else if constexpr (WORDS % 2 == 0) {
#pragma unroll
        for (int k = 0; k < WORDS; k += 2) {
          const uint2 x = reinterpret_cast<const uint2*>(buf)[(k / 2) * kWg + t];
          sum += x.x + x.y;
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
    }
    sums[t] = sum;
  }
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (tid == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
}

// ---------------------------------------------------------------------------------------------
// setmaxnreg as FA3 uses it: 384 threads start at 168 registers (65536 / 384, rounded down to 8);
// the producer warpgroup drops to 24, the two consumers rise to 240 (128*24 + 256*240 = 64512).
__global__ void __launch_bounds__(384, 1) setmaxnreg_kernel(uint32_t* cycles) {
  __syncthreads();
  const uint64_t c0 = clock_cycles();
  if (threadIdx.x < kWg) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
  }
  const uint64_t c1 = clock_cycles();
  if (threadIdx.x % 32 == 0) cycles[blockIdx.x * 12 + threadIdx.x / 32] = uint32_t(c1 - c0);
}

// A dec to 24 and an inc back to 168 by warpgroup 0, `iters` times, while the others idle.
__global__ void __launch_bounds__(384, 1) setmaxnreg_loop_kernel(int iters, CtaTime* times) {
  __syncthreads();
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  if (threadIdx.x < kWg) {
    for (int i = 0; i < iters; ++i) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
      asm volatile("setmaxnreg.inc.sync.aligned.u32 168;" ::: "memory");
    }
  }
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (threadIdx.x == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
}

// ---------------------------------------------------------------------------------------------
static uint32_t take_mismatches() {
  uint32_t m = 0, zero = 0;
  CK(cudaMemcpyFromSymbol(&m, g_mismatches, sizeof(m)));
  CK(cudaMemcpyToSymbol(g_mismatches, &zero, sizeof(zero)));
  return m;
}

struct Timed {
  CtaSummary s;
  bool distinct = true;
};

// Launches `launch` 1 + 3 times on `grid` CTAs and summarises the 3 timed launches.
template <typename F>
static Timed timed(int grid, CtaTime* d_t, F launch) {
  std::vector<CtaTime> all;
  bool distinct = true;
  for (int l = 0; l <= 3; ++l) {
    launch();
    CK_LAUNCH();
    std::vector<CtaTime> t(grid);
    CK(cudaMemcpy(t.data(), d_t, grid * sizeof(CtaTime), cudaMemcpyDeviceToHost));
    if (l > 0) {
      distinct = distinct && summarize(t).distinct_sms;
      all.insert(all.end(), t.begin(), t.end());
    }
  }
  return Timed{summarize(all), distinct};
}

static Record base(const char* kind, const Timed& t, bool ok, int iters) {
  Record r;
  r.str("kind", kind).integer("iters", iters).boolean("ok", ok).boolean("one_cta_per_sm", t.distinct)
      .stats("cta_cycles", t.s.cycles).stats("sm_clock_mhz", t.s.mhz);
  if (ok) r.num("cycles_per_iter", t.s.cycles.median / iters);
  return r;
}

template <int WORDS, int kPoll>
static void run_handoff(Report& rep, int sms, CtaTime* d_t, uint32_t* d_sums) {
  const int iters = 2048, smem = WORDS * 4 * kWg;
  const int poll = kPoll;
  auto kernel = handoff_kernel<WORDS, kPoll>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));
  const int dyn = std::max(smem, kOneCtaPerSmSmem);
  {
  const Timed t = timed(sms, d_t, [&] { kernel<<<sms, 256, dyn>>>(iters, d_t, d_sums); });
  std::vector<uint32_t> sums(kWg);
  CK(cudaMemcpy(sums.data(), d_sums, sizeof(uint32_t) * kWg, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int th = 0; th < kWg; ++th) {
    uint32_t want = 0;
    for (int i = 0; i < iters; ++i)
      for (int k = 0; k < WORDS; ++k) want += uint32_t(i * WORDS + k + th);
    wrong += sums[th] != want;
  }
  const uint32_t flags = read_and_clear_error_flags();
  Record r = base("handoff", t, wrong == 0 && flags == 0, iters);
  r.integer("bytes", WORDS * 4 * kWg).integer("words_per_thread", WORDS).integer("wrong_threads", wrong)
      .integer("error_flags", flags).str("poll", kPollNames[poll]);
  rep.add(r);
  }
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "sync.json";
  Report rep("sync");
  rep.clock_probe("start");
  const int sms = sm_count();
  CtaTime* d_t = nullptr;
  uint32_t *d_u = nullptr, *d_sums = nullptr;
  CK(cudaMalloc(&d_t, sizeof(CtaTime) * sms));
  CK(cudaMalloc(&d_u, sizeof(uint32_t) * sms * 12));
  CK(cudaMalloc(&d_sums, sizeof(uint32_t) * kWg));
  for (auto k : {(const void*)mbar_pingpong_kernel<0>, (const void*)mbar_pingpong_kernel<1>,
                 (const void*)mbar_pingpong_kernel<2>, (const void*)named_barrier_kernel, (const void*)wait_issue_kernel,
                 (const void*)setmaxnreg_loop_kernel, (const void*)setmaxnreg_kernel})
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneCtaPerSmSmem));

  // mbarrier round trips
  const int iters = 4096;
  for (int poll = 0; poll < 3; ++poll)
    for (int mode = 0; mode < 2; ++mode) {
      const Timed t =
          timed(sms, d_t, [&] {
            if (poll == 0) mbar_pingpong_kernel<0><<<sms, 256, kOneCtaPerSmSmem>>>(iters, mode, d_t);
            else if (poll == 1) mbar_pingpong_kernel<1><<<sms, 256, kOneCtaPerSmSmem>>>(iters, mode, d_t);
            else mbar_pingpong_kernel<2><<<sms, 256, kOneCtaPerSmSmem>>>(iters, mode, d_t);
          });
      const uint32_t bad = take_mismatches(), flags = read_and_clear_error_flags();
      Record r = base("mbarrier_round_trip", t, bad == 0 && flags == 0, iters);
      r.str("between", mode == 0 ? "warpgroups (one arrival per warp, 128 waiters)" : "one thread and one thread")
          .str("poll", kPollNames[poll]).integer("token_mismatches", bad).integer("error_flags", flags);
      rep.add(r);
    }
  // wait on a completed phase
  {
    const int n = 8192;
    const Timed t = timed(sms, d_t, [&] { wait_issue_kernel<<<sms, 32, kOneCtaPerSmSmem>>>(n, d_t, d_u); });
    uint32_t passed = 0;
    CK(cudaMemcpy(&passed, d_u, sizeof(passed), cudaMemcpyDeviceToHost));
    Record r = base("wait_issue", t, passed == uint32_t(n), n);
    r.integer("passed", passed);
    rep.add(r);
  }
  // named barriers
  struct Nb {
    const char* name;
    int n, mode;
  } nbs[3] = {{"bar_sync", 256, 0}, {"bar_sync", 384, 0}, {"bar_pingpong", 256, 1}};
  for (const Nb& nb : nbs) {
    named_barrier_kernel<<<sms, 384, kOneCtaPerSmSmem>>>(256, nb.n, nb.mode, 1, d_t);  // checked launch
    CK_LAUNCH();
    const uint32_t bad = take_mismatches();
    const Timed t = timed(sms, d_t, [&] { named_barrier_kernel<<<sms, 384, kOneCtaPerSmSmem>>>(iters, nb.n, nb.mode, 0, d_t); });
    Record r = base(nb.name, t, bad == 0, iters);
    r.integer("threads", nb.n).integer("check_mismatches", bad);
    rep.add(r);
  }
  // hand-off sweep: 0 .. 32 KiB per round
  run_handoff<0, 0>(rep, sms, d_t, d_sums);
  run_handoff<0, 2>(rep, sms, d_t, d_sums);
  run_handoff<2, 0>(rep, sms, d_t, d_sums);
  run_handoff<2, 2>(rep, sms, d_t, d_sums);
  run_handoff<4, 0>(rep, sms, d_t, d_sums);
  run_handoff<4, 2>(rep, sms, d_t, d_sums);
  run_handoff<8, 0>(rep, sms, d_t, d_sums);
  run_handoff<8, 2>(rep, sms, d_t, d_sums);
  run_handoff<16, 0>(rep, sms, d_t, d_sums);
  run_handoff<16, 2>(rep, sms, d_t, d_sums);
  run_handoff<32, 0>(rep, sms, d_t, d_sums);
  run_handoff<32, 2>(rep, sms, d_t, d_sums);
  run_handoff<64, 0>(rep, sms, d_t, d_sums);
  run_handoff<64, 2>(rep, sms, d_t, d_sums);
  // setmaxnreg
  {
    setmaxnreg_kernel<<<sms, 384, kOneCtaPerSmSmem>>>(d_u);
    CK_LAUNCH();
    std::vector<uint32_t> c(sms * 12);
    CK(cudaMemcpy(c.data(), d_u, sizeof(uint32_t) * c.size(), cudaMemcpyDeviceToHost));
    std::vector<double> dec, inc;
    for (int b = 0; b < sms; ++b)
      for (int w = 0; w < 12; ++w) (w < 4 ? dec : inc).push_back(c[b * 12 + w]);
    Record r;
    r.str("kind", "setmaxnreg_fa3").boolean("ok", true).stats("dec_to_24_cycles", stats_of(dec))
        .stats("inc_to_240_cycles", stats_of(inc));
    rep.add(r);
    const int n = 1024;
    const Timed t = timed(sms, d_t, [&] { setmaxnreg_loop_kernel<<<sms, 384, kOneCtaPerSmSmem>>>(n, d_t); });
    Record q = base("setmaxnreg_pair", t, true, n);
    rep.add(q);
  }
  rep.clock_probe("end");
  rep.write(out_path);
  return 0;
}
