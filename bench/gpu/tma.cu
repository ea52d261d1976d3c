// TMA 2-D tile loads (cp.async.bulk.tensor, completion on an mbarrier) on Hopper.
//
//   latency:    one CTA, one load in flight: cycles from issue to the mbarrier phase completing, for
//               a tile already in L2 (loaded once before) and for a tile straight from HBM (L2
//               flushed, each tile touched once).
//   throughput: a ring of tiles kept full by one thread (192 KiB in flight), on one SM alone and on
//               every SM at once, reading an 8 MiB L2-resident region or streaming a 2 GiB tensor.
//
// Check: tensor element (x, y) holds hash(x, y). Every latency sample's tile is summed and compared
// with the host's sum; after a throughput run every ring slot's last tile is summed and compared
// with the sum of hash over that tile's coordinates. A mismatch or a timed-out wait reports no time.
#include "tma_common.cuh"

constexpr int kWidth = 4096;                  // elements (uint16) per row: 8 KiB rows
constexpr int kL2Rows = 1024;                 // 8 MiB region that stays in the 50 MB L2
constexpr int kHbmRows = 262144;              // 2 GiB tensor streamed once per launch
constexpr int kRingBytes = 192 * 1024;        // tile bytes in flight per SM
constexpr int kThreads = 128;

__device__ __forceinline__ void tile_xy(uint32_t tile, int bx, int by, int* x, int* y) {
  const uint32_t per_row = kWidth / bx;
  *x = int(tile % per_row) * bx;
  *y = int(tile / per_row) * by;
}


// One load in flight, timed by thread 0 on the SM's clock64. What each sample records (all cycles
// relative to t0, the clock read just before mbarrier.arrive.expect_tx and the TMA issue):
//   phase:     the first poll that saw the mbarrier phase complete returned (the latency reported);
//   last_fail: the last poll that still saw it incomplete returned (the phase completed in between);
//   polls:     how many polls that took;
//   data_lo/hi: with `watch`, when warp 1 first saw the earliest / latest of 32 words spread over the tile
//              land in shared memory (plain volatile loads of words preset to the complement of their
//              final value): the data's arrival, observed without the mbarrier.
// Why the first runs' latencies sat on a ~187-cycle grid (issue 21): a poll of a pending mbarrier,
// try_wait without a suspend-time hint or test_wait alike, returns only ~180-220 SM cycles after it
// was issued (`last_fail_gap`), so the loop saw the completion at issue + c + k * (poll period). The
// fix (`hint_ns` = kSuspendHintNs, as CUTLASS waits): try_wait suspends the thread until the phase
// completes and it resumes at once. Diagnostics: `dither` waits a pseudo-random 0..1023 cycles before
// each issue (the grid stays: it is anchored at the issue, not at a free-running clock); `watch`.
// `busy`: warps 2-3 run FFMA chains while thread 0 waits (an SM that is not idle). `hint_ns`: try_wait's
// suspendTimeHint operand (0 = none). `legacy`: the first runs' wait loop (mbar_wait, no clock read per
// poll). kTestWait: poll with test_wait instead of try_wait.
struct LatSample {
  uint32_t phase, last_fail, polls, data_lo, data_hi, pad0, pad1, pad2;
};
enum LatMode : int { kDither = 1, kWatch = 2, kBusy = 4, kLegacy = 8 };

__device__ __forceinline__ uint32_t tile_word(int x0, int y0, int bx, int w) {
  // 32-bit word w of the tile (two uint16 elements) in row-major box order (no swizzle).
  const int e = 2 * w;
  return hash_at(uint32_t(x0 + e % bx), uint32_t(y0 + e / bx)) |
         (hash_at(uint32_t(x0 + (e + 1) % bx), uint32_t(y0 + (e + 1) / bx)) << 16);
}

template <bool kTestWait>
__global__ void __launch_bounds__(kThreads, 1)
    tma_latency_kernel(const __grid_constant__ CUtensorMap map, int bx, int by, const uint32_t* tiles, int samples,
                       int warm, int mode, uint32_t hint_ns, LatSample* out, uint32_t* sums, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t bar_storage;
  __shared__ uint32_t scratch;
  __shared__ int failed;
  __shared__ volatile int stop_busy;
  __shared__ volatile uint64_t t0_shared;
  __shared__ volatile int t0_valid;
  uint8_t* buf = align_1024(smem_raw);
  const uint32_t bar = smem_addr(&bar_storage), dst = smem_addr(buf);
  const uint32_t bytes = uint32_t(bx) * by * 2;
  const int words = int(bytes / 4);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_fence_init();
    failed = 0;
  }
  __syncthreads();
  uint32_t phase = 0, rng = 0x1234567u;
  float acc0 = threadIdx.x, acc1 = 1.f;
  for (int s = 0; s < samples; ++s) {
    int x, y;
    tile_xy(tiles[s], bx, by, &x, &y);
    if (threadIdx.x == 0 && warm) {
      mbar_arrive_expect_tx(bar, bytes);
      tma_load_2d(dst, &map, x, y, bar);
      if (!mbar_wait<kTestWait>(bar, phase)) failed = 1;
      phase ^= 1;
    }
    __syncthreads();  // the warm-up copy has landed before the watcher presets its words
    // The watcher's words: lane l watches word (l + 1) * words / 32 - 1, preset to its complement.
    const int watched = (lane + 1) * (words / 32) - 1;
    const uint32_t want = tile_word(x, y, bx, watched);
    if (warp == 1 && (mode & kWatch)) reinterpret_cast<volatile uint32_t*>(buf)[watched] = ~want;
    if (threadIdx.x == 0) {
      stop_busy = 0;
      t0_valid = 0;
    }
    fence_proxy_async_smem();  // the generic-proxy presets before the TMA's (async-proxy) writes
    __syncthreads();
    if (failed) break;
    if (threadIdx.x == 0) {
      if (mode & kDither) {
        rng = rng * 1664525u + 1013904223u;
        const uint64_t until = clock_cycles() + (rng >> 22);  // 0..1023 cycles
        while (clock_cycles() < until) {
        }
      }
      const uint64_t t0 = clock_cycles();
      t0_shared = t0;
      t0_valid = 1;
      mbar_arrive_expect_tx(bar, bytes);
      tma_load_2d(dst, &map, x, y, bar);
      uint64_t last_fail = t0, now = t0;
      uint32_t polls = 0;
      bool ok = false;
      if (mode & kLegacy) {  // the first runs' loop: mbar_wait, clock64 read once it returns
        ok = mbar_wait<kTestWait>(bar, phase);
        now = clock_cycles();
        polls = 1;
      } else for (;;) {
        const bool done = kTestWait ? mbar_test_wait(bar, phase)
                                    : (hint_ns ? mbar_try_wait_hint(bar, phase, hint_ns) : mbar_try_wait(bar, phase));
        now = clock_cycles();
        ++polls;
        if (done) {
          ok = true;
          break;
        }
        last_fail = now;
        if (now - t0 > (1ull << 31)) {
          atomicOr(&g_error_flags, kErrTimeout);
          break;
        }
      }
      phase ^= 1;
      stop_busy = 1;
      out[s].phase = ok ? uint32_t(now - t0) : 0;
      out[s].last_fail = uint32_t(last_fail - t0);
      out[s].polls = polls;
      if (!ok) failed = 1;
    } else if (warp == 1 && (mode & kWatch)) {
      const volatile uint32_t* w = reinterpret_cast<const volatile uint32_t*>(buf);
      uint64_t seen = 0;
      bool mine = false;
      const uint64_t start = clock_cycles();
      for (;;) {
        const uint32_t v = w[watched];
        const uint64_t now = clock_cycles();
        if (!mine && v == want) {
          mine = true;
          seen = now;
        }
        if (__all_sync(0xFFFFFFFFu, mine)) break;
        if (now - start > (1ull << 31)) {
          seen = 0;
          break;
        }
      }
      while (!t0_valid) {
      }
      const uint64_t t0 = t0_shared;
      // lanes' first-seen times relative to t0: the earliest and the latest word
      uint32_t rel = seen > t0 ? uint32_t(seen - t0) : 0, lo = rel, hi = rel;
      for (int o = 16; o; o >>= 1) {
        lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, o));
        hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, o));
      }
      if (lane == 0) {
        out[s].data_lo = lo;
        out[s].data_hi = hi;
      }
    } else if (warp >= 2 && (mode & kBusy)) {
      while (!stop_busy) {
#pragma unroll 16
        for (int i = 0; i < 64; ++i) {
          acc0 = fmaf(acc0, 1.0001f, 0.5f);
          acc1 = fmaf(acc1, 0.9999f, 0.25f);
        }
      }
    }
    __syncthreads();
    if (failed) break;
    const uint32_t sum = smem_tile_sum(reinterpret_cast<const uint16_t*>(buf), bx * by, &scratch);
    if (threadIdx.x == 0) sums[s] = sum;
    __syncthreads();
  }
  if (acc0 == 12345.f) sink[threadIdx.x] = acc0 + acc1;  // keeps the busy warps' FFMAs alive
}

// A ring of `stages` slots kept full by thread 0, waiting as CUTLASS does (try_wait with the suspend
// hint; the first runs polled without it, bench/results/h200/README.md compares the two); tile `it` of CTA c is first + c * cta_stride + it
// (modulo `modulo` tiles: the L2 region wraps, the HBM stream never does).
__global__ void __launch_bounds__(kThreads, 1)
    tma_throughput_kernel(const __grid_constant__ CUtensorMap map, int bx, int by, int rows, int stages, int iters,
                          uint32_t first, uint32_t cta_stride, uint32_t modulo, CtaTime* times, uint32_t* bad) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t bars[32];
  __shared__ uint32_t scratch;
  uint8_t* ring = align_1024(smem_raw);
  const uint32_t bytes = uint32_t(bx) * by * 2;
  auto tile_of = [&](int it) { return (first + blockIdx.x * cta_stride + uint32_t(it)) % modulo; };
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) mbar_init(smem_addr(&bars[i]), 1);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  if (threadIdx.x == 0) {
    // The issuing thread does no division in the loop: a single thread's dependent integer divides
    // (tile -> x, y) cost ~600 cycles per tile and capped the first runs at one tile per ~670 cycles.
    int x, y;
    tile_xy(tile_of(0), bx, by, &x, &y);
    int slot = 0;
    uint32_t parity = 0;
    bool ok = true;
    for (int it = 0; it < iters && ok; ++it) {
      const uint32_t bar = smem_addr(&bars[slot]);
      if (it >= stages) ok = mbar_wait_hint(bar, parity);
      mbar_arrive_expect_tx(bar, bytes);
      tma_load_2d(smem_addr(ring + size_t(slot) * bytes), &map, x, y, bar);
      x += bx;
      if (x == kWidth) {
        x = 0;
        y += by;
        if (y == rows) y = 0;
      }
      if (++slot == stages) {
        slot = 0;
        if (it >= stages) parity ^= 1;
      }
    }
    // Drain: wait for the last `stages` loads, oldest first, as the loop would have.
    for (int j = 0; j < stages && ok; ++j) {
      ok = mbar_wait_hint(smem_addr(&bars[slot]), parity);
      if (++slot == stages) {
        slot = 0;
        parity ^= 1;
      }
    }
  }
  __syncthreads();
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (threadIdx.x == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
  // Every slot holds the last tile loaded into it.
  uint32_t mismatches = 0;
  for (int slot = 0; slot < stages; ++slot) {
    const int it = last_step_in_slot(slot, iters, stages);
    int x, y;
    tile_xy(tile_of(it), bx, by, &x, &y);
    mismatches += !tile_matches(ring + size_t(slot) * bytes, x, y, bx, by, &scratch);
  }
  if (threadIdx.x == 0) bad[blockIdx.x] = mismatches;
}

static CUtensorMap make_map(uint16_t* base, int rows, const Box& box) {
  return make_map_2d(base, kWidth, rows, box);
}

static uint32_t host_tile_sum(uint32_t tile, const Box& box) {
  const uint32_t per_row = kWidth / box.bx;
  const int x0 = int(tile % per_row) * box.bx, y0 = int(tile / per_row) * box.by;
  uint32_t s = 0;
  for (int y = 0; y < box.by; ++y)
    for (int x = 0; x < box.bx; ++x) s += hash_at(uint32_t(x0 + x), uint32_t(y0 + y));
  return s;
}

static void flush_l2(void* scratch, size_t bytes) {
  CK(cudaMemset(scratch, 0x5A, bytes));
  CK(cudaDeviceSynchronize());
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "tma.json";
  Report report("tma");
  report.clock_probe("start");
  const int sms = sm_count();
  uint16_t *l2 = nullptr, *hbm = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CK(cudaMalloc(&l2, size_t(kWidth) * kL2Rows * 2));
  CK(cudaMalloc(&hbm, size_t(kWidth) * kHbmRows * 2));
  CK(cudaMalloc(&flush, flush_bytes));
  fill_kernel<<<sms * 4, 256>>>(l2, kWidth, kL2Rows);
  CK_LAUNCH();
  fill_kernel<<<sms * 4, 256>>>(hbm, kWidth, kHbmRows);
  CK_LAUNCH();
  const int smem = kRingBytes + 1024;
  CK(cudaFuncSetAttribute(tma_latency_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(tma_latency_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(tma_throughput_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

  const Box boxes[] = {{128, 32, false}, {128, 64, false}, {128, 128, false}, {128, 256, false},
                       {64, 128, true},  {64, 256, true}};
  const int samples = 256;
  uint32_t *d_tiles = nullptr, *d_sums = nullptr, *d_bad = nullptr;
  LatSample* d_lat = nullptr;
  float* d_sink = nullptr;
  CtaTime* d_times = nullptr;
  CK(cudaMalloc(&d_tiles, sizeof(uint32_t) * samples));
  CK(cudaMalloc(&d_lat, sizeof(LatSample) * samples));
  CK(cudaMalloc(&d_sums, sizeof(uint32_t) * samples));
  CK(cudaMalloc(&d_sink, sizeof(float) * kThreads));
  CK(cudaMalloc(&d_bad, sizeof(uint32_t) * sms));
  CK(cudaMalloc(&d_times, sizeof(CtaTime) * sms));

  struct Variant {
    int mode;
    uint32_t hint_ns;
    bool test_wait;
    bool diagnostic;  // only for the unswizzled 8 and 16 KiB boxes
  };
  const Variant variants[] = {
      {kLegacy, 0, false, false}, {kLegacy, 0, true, false},     // as the first runs measured (the ~187-cycle grid)
      {0, 0, false, false},       {0, 0, true, false},           // clock64 after every poll: the poll period
      {0, kSuspendHintNs, false, false},                         // the fix: try_wait + suspend hint (CUTLASS)
      {kWatch, kSuspendHintNs, false, true},                     // data arrival seen without the mbarrier
      {kDither, kSuspendHintNs, false, true},                    // random issue phase
      {kLegacy | kDither, 0, false, true},                       // the grid is anchored at the issue
      {kBusy, kSuspendHintNs, false, true},                      // an SM that is not idle
      {0, 1, false, true},                                       // suspend hint 1 ns
  };
  auto join = [](const std::vector<uint32_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
    return out + "]";
  };

  for (const Box& box : boxes) {
    const uint32_t tiles_l2 = uint32_t(size_t(kWidth) * kL2Rows * 2 / box.bytes());
    const uint32_t tiles_hbm = uint32_t(size_t(kWidth) * kHbmRows * 2 / box.bytes());
    // ---- latency: one load in flight
    for (const Variant& v : variants) {
      if (v.diagnostic && (box.swizzle || box.bytes() > 16384)) continue;
      for (int src = 0; src < 2; ++src) {
        const bool from_l2 = src == 0, test_wait = v.test_wait;
        const CUtensorMap map = make_map(from_l2 ? l2 : hbm, from_l2 ? kL2Rows : kHbmRows, box);
        std::vector<uint32_t> tiles(samples);
        // HBM tiles are spread over the tensor, 1 + 7919 apart, so no two share a DRAM page or an L2 line.
        for (int s = 0; s < samples; ++s)
          tiles[s] = from_l2 ? uint32_t(s * 5) % tiles_l2 : uint32_t((size_t(s) * 7919 + 1) % tiles_hbm);
        CK(cudaMemcpy(d_tiles, tiles.data(), sizeof(uint32_t) * samples, cudaMemcpyHostToDevice));
        CK(cudaMemset(d_lat, 0, sizeof(LatSample) * samples));
        if (!from_l2) flush_l2(flush, flush_bytes);
        const int mode = box.swizzle ? (v.mode & ~kWatch) : v.mode;
        if (test_wait)
          tma_latency_kernel<true><<<1, kThreads, smem>>>(map, box.bx, box.by, d_tiles, samples, from_l2 ? 1 : 0,
                                                          mode, v.hint_ns, d_lat, d_sums, d_sink);
        else
          tma_latency_kernel<false><<<1, kThreads, smem>>>(map, box.bx, box.by, d_tiles, samples, from_l2 ? 1 : 0,
                                                           mode, v.hint_ns, d_lat, d_sums, d_sink);
        CK_LAUNCH();
        std::vector<LatSample> lat_s(samples);
        std::vector<uint32_t> sums(samples);
        CK(cudaMemcpy(lat_s.data(), d_lat, sizeof(LatSample) * samples, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sums.data(), d_sums, sizeof(uint32_t) * samples, cudaMemcpyDeviceToHost));
        int wrong = 0, unseen = 0;
        std::vector<double> lat, gap, polls, dlo, dhi;
        std::vector<uint32_t> raw, raw_lo, raw_hi, raw_fail;
        for (int s = 0; s < samples; ++s) {
          wrong += sums[s] != host_tile_sum(tiles[s], box);
          lat.push_back(lat_s[s].phase);
          raw.push_back(lat_s[s].phase);
          raw_fail.push_back(lat_s[s].last_fail);
          gap.push_back(double(lat_s[s].phase) - double(lat_s[s].last_fail));
          polls.push_back(lat_s[s].polls);
          if (mode & kWatch) {
            // a watched word never seen, or seen after the phase completed and was observed, is a failed watch
            unseen += lat_s[s].data_lo == 0 || lat_s[s].data_hi == 0;
            dlo.push_back(lat_s[s].data_lo);
            dhi.push_back(lat_s[s].data_hi);
            raw_lo.push_back(lat_s[s].data_lo);
            raw_hi.push_back(lat_s[s].data_hi);
          }
        }
        const uint32_t flags = read_and_clear_error_flags();
        const bool ok = wrong == 0 && flags == 0 && unseen == 0;
        Record r;
        r.str("kind", "latency").str("source", from_l2 ? "L2" : "HBM").str("poll", test_wait ? "test_wait" : "try_wait")
            .boolean("dither", mode & kDither).boolean("legacy_loop", mode & kLegacy).boolean("watch", mode & kWatch).boolean("busy", mode & kBusy)
            .integer("suspend_hint_ns", v.hint_ns)
            .integer("box_x", box.bx).integer("box_y", box.by)
            .integer("bytes", box.bytes()).boolean("swizzle_128b", box.swizzle).integer("samples", samples)
            .boolean("ok", ok).integer("wrong_tiles", wrong).integer("unseen_watches", unseen)
            .integer("error_flags", flags);
        if (ok) {
          r.stats("cycles", stats_of(lat)).stats("last_fail_gap", stats_of(gap)).stats("polls", stats_of(polls));
          r.raw("cycles_raw", join(raw)).raw("last_fail_raw", join(raw_fail));
          if (mode & kWatch) {
            r.stats("data_first", stats_of(dlo)).stats("data_last", stats_of(dhi));
            r.raw("data_first_raw", join(raw_lo)).raw("data_last_raw", join(raw_hi));
          }
        }
        report.add(r);
      }
    }
    // ---- throughput: ring of kRingBytes, one SM or all SMs
    const int stages = kRingBytes / box.bytes();
    // pattern 0: the L2 region, CTAs staggered 37 tiles apart; 1: the L2 region, every CTA on the same
    // tile at about the same time (the sharing of a GEMM's A/B panels); 2: the HBM stream.
    for (int pattern = 0; pattern < 3; ++pattern) {
      const bool from_l2 = pattern < 2;
      const CUtensorMap map = make_map(from_l2 ? l2 : hbm, from_l2 ? kL2Rows : kHbmRows, box);
      for (int grid : {1, sms}) {
        if (pattern == 1 && grid == 1) continue;
        // L2: 16 MiB per CTA out of the 8 MiB region; HBM: 8 MiB per CTA, never re-read in a launch.
        const int iters = int((size_t(from_l2 ? 16 : 8) << 20) / box.bytes());
        std::vector<CtaTime> all;
        int bad_ctas = 0;
        for (int l = 0; l <= 3; ++l) {
          const uint32_t stride = pattern == 0 ? 37u : pattern == 1 ? 0u : uint32_t(iters);
          const uint32_t first = from_l2 ? 0u : uint32_t((size_t(l) * grid * iters) % tiles_hbm);
          tma_throughput_kernel<<<grid, kThreads, smem>>>(map, box.bx, box.by, from_l2 ? kL2Rows : kHbmRows, stages,
                                                         iters, first, stride,
                                                         from_l2 ? tiles_l2 : tiles_hbm, d_times, d_bad);
          CK_LAUNCH();
          std::vector<CtaTime> t(grid);
          std::vector<uint32_t> bad(grid);
          CK(cudaMemcpy(t.data(), d_times, sizeof(CtaTime) * grid, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(bad.data(), d_bad, sizeof(uint32_t) * grid, cudaMemcpyDeviceToHost));
          for (uint32_t b : bad) bad_ctas += b != 0;
          if (l > 0) all.insert(all.end(), t.begin(), t.end());  // launch 0 warms L2 and is not timed
        }
        const uint32_t flags = read_and_clear_error_flags();
        const bool ok = bad_ctas == 0 && flags == 0;
        const CtaSummary s = summarize(all);
        CtaSummary first_launch = summarize(std::vector<CtaTime>(all.begin(), all.begin() + grid));
        Record r;
        r.str("kind", "throughput").str("source", from_l2 ? "L2" : "HBM").str("wait", "try_wait_hint")
            .str("pattern", pattern == 0 ? "staggered" : pattern == 1 ? "lockstep" : "stream").integer("box_x", box.bx)
            .integer("box_y", box.by).integer("bytes", box.bytes()).boolean("swizzle_128b", box.swizzle)
            .integer("stages", stages).integer("tiles_per_cta", iters).integer("ctas", grid).boolean("ok", ok)
            .integer("bad_ctas", bad_ctas).integer("error_flags", flags)
            .boolean("one_cta_per_sm", first_launch.distinct_sms).stats("cta_cycles", s.cycles)
            .stats("sm_clock_mhz", s.mhz);
        if (ok) {
          std::vector<double> bpc;
          for (const CtaTime& t : all) bpc.push_back(double(iters) * box.bytes() / double(t.cycles));
          r.stats("bytes_per_clk_per_sm", stats_of(bpc));
          // Whole-GPU bandwidth while all CTAs stream: bytes over the slowest CTA's wall time.
          double slowest_ns = 0;
          for (const CtaTime& t : all) slowest_ns = std::max(slowest_ns, double(t.ns));
          r.num("gpu_gbytes_per_s_lower_bound", double(iters) * box.bytes() * grid / slowest_ns);
        }
        report.add(r);
      }
    }
  }
  report.clock_probe("end");
  report.write(out_path);
  return 0;
}
