// TMA latency under load (issue 18/21): how long a tile load takes while every SM streams a GEMM's
// K loop at the tensor cores' pace, rather than one load alone on an idle GPU (tma.cu).
//
// One CTA per SM runs the first two waves of an 8192^3 fp16 GEMM's loads: output tile t = CTA +
// wave * SMs, rows tm = t / tiles_n, columns tn = t % tiles_n, raster order, so an A panel is shared
// by the CTAs of a tile row and a B panel by the CTAs of a tile column, as in a real GEMM. Per K step
// a 128 x 64 A tile (16 KiB) and a block_n x 64 B tile (128B swizzle both) land in one slot of a ring
// of `depth` slots, each with its own completion barrier. Threads (lane 0 of each warp):
//   warp 0, producer: waits for a free slot, records the issue clock, issues A and B.
//   warp 1, consumer: stands in for the MMA: once the observers have seen both tiles land, it holds
//           the slot until max(landing, end of the previous step) + `pace` SM cycles, then frees it.
//   warps 2, 3: observers, one per tile: wait on its barrier in order (try_wait with the suspend hint,
//           so the thread resumes when the phase completes) and record the clock.
// Latency = observed completion - issue, per load; reported per (block_n, pace, depth) over every
// CTA and step of the two timed launches (the first launch warms L2 and is not counted).
//
// Check: element (x, y) holds hash(x, y); after the run every slot's last A and B tiles are summed
// and compared with the hash sums of their coordinates. A mismatch or timed-out wait reports no time.
#include <algorithm>
#include <string>
#include <vector>

#include "tma_common.cuh"

constexpr int kDim = 8192;      // M = N = K
constexpr int kBlockM = 128;
constexpr int kBlockK = 64;     // 64 fp16 = 128 B: one 128B-swizzled row
constexpr int kThreads = 128;
constexpr int kMaxDepth = 8;
constexpr int kWaves = 2;

struct Stamps {
  uint32_t* issue;   // [cta][step]
  uint32_t* done_a;  // [cta][step]
  uint32_t* done_b;  // [cta][step]
};

__global__ void __launch_bounds__(kThreads, 1)
    tma_loaded_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      int block_n, int depth, uint32_t pace, Stamps st, CtaTime* times, uint32_t* bad) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_a[kMaxDepth], full_b[kMaxDepth], empty[kMaxDepth];
  __shared__ volatile int seen_a, seen_b;  // steps the observers have recorded
  __shared__ volatile uint64_t ready_a[kMaxDepth], ready_b[kMaxDepth];  // their completion clocks, per slot
  __shared__ uint32_t scratch;
  uint8_t* ring = align_1024(smem_raw);
  const int bytes_a = kBlockM * kBlockK * 2, bytes_b = block_n * kBlockK * 2, slot_bytes = bytes_a + bytes_b;
  const int ksteps = kDim / kBlockK, tiles_n = kDim / block_n, steps = kWaves * ksteps;
  const size_t base = size_t(blockIdx.x) * steps;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < depth; ++i) {
      mbar_init(smem_addr(&full_a[i]), 1);
      mbar_init(smem_addr(&full_b[i]), 1);
      mbar_init(smem_addr(&empty[i]), 1);
    }
    seen_a = seen_b = 0;
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t c0 = clock_cycles(), g0 = global_ns();
  auto coords = [&](int s, int* k, int* tm, int* tn) {
    const int t = int(blockIdx.x) + (s / ksteps) * int(gridDim.x);
    *k = (s % ksteps) * kBlockK;
    *tm = t / tiles_n;
    *tn = t % tiles_n;
  };
  bool ok = true;
  if (lane == 0 && warp == 0) {
    for (int s = 0; s < steps && ok; ++s) {
      const int slot = s % depth;
      if (s >= depth) ok = mbar_wait_hint(smem_addr(&empty[slot]), uint32_t((s / depth - 1) & 1));
      int k, tm, tn;
      coords(s, &k, &tm, &tn);
      uint8_t* dst = ring + size_t(slot) * slot_bytes;
      st.issue[base + s] = uint32_t(clock_cycles());
      mbar_arrive_expect_tx(smem_addr(&full_a[slot]), bytes_a);
      tma_load_2d(smem_addr(dst), &map_a, k, tm * kBlockM, smem_addr(&full_a[slot]));
      mbar_arrive_expect_tx(smem_addr(&full_b[slot]), bytes_b);
      tma_load_2d(smem_addr(dst + bytes_a), &map_b, k, tn * block_n, smem_addr(&full_b[slot]));
    }
  } else if (lane == 0 && warp == 1) {
    // The MMA of step s starts when both tiles have landed and the previous MMA has ended, and holds
    // the slot for `pace` cycles: it starts at max(completion seen by the observers, previous end), so
    // the consumer's own wait overhead does not slow the pace.
    uint64_t prev_end = 0;
    for (int s = 0; s < steps; ++s) {
      const int slot = s % depth;
      while (seen_a <= s || seen_b <= s) {
      }
      const uint64_t ready = ready_a[slot] > ready_b[slot] ? ready_a[slot] : ready_b[slot];
      const uint64_t end = (ready > prev_end ? ready : prev_end) + pace;
      while (clock_cycles() < end) {
      }
      prev_end = end;
      mbar_arrive(smem_addr(&empty[slot]));
    }
  } else if (lane == 0 && (warp == 2 || warp == 3)) {
    uint64_t* bars = warp == 2 ? full_a : full_b;
    uint32_t* out = warp == 2 ? st.done_a : st.done_b;
    volatile int* seen = warp == 2 ? &seen_a : &seen_b;
    volatile uint64_t* ready = warp == 2 ? ready_a : ready_b;
    for (int s = 0; s < steps && ok; ++s) {
      ok = mbar_wait_hint(smem_addr(&bars[s % depth]), uint32_t((s / depth) & 1));
      const uint64_t now = clock_cycles();
      out[base + s] = uint32_t(now);
      ready[s % depth] = now;
      __threadfence_block();
      *seen = s + 1;
    }
    if (!ok) *seen = steps + 1;  // never leave the consumer spinning
  }
  __syncthreads();
  const uint64_t c1 = clock_cycles(), g1 = global_ns();
  if (threadIdx.x == 0) times[blockIdx.x] = CtaTime{c1 - c0, g1 - g0, sm_id(), 0};
  // Every slot holds the last A and B tiles loaded into it.
  uint32_t mismatches = 0;
  for (int slot = 0; slot < depth; ++slot) {
    const int s = last_step_in_slot(slot, steps, depth);
    int k, tm, tn;
    coords(s, &k, &tm, &tn);
    const uint8_t* src = ring + size_t(slot) * slot_bytes;
    mismatches += !tile_matches(src, k, tm * kBlockM, kBlockK, kBlockM, &scratch);
    mismatches += !tile_matches(src + bytes_a, k, tn * block_n, kBlockK, block_n, &scratch);
  }
  if (threadIdx.x == 0) bad[blockIdx.x] = mismatches;
}

// p10, p50, p90 and p99 of a sample, as a JSON object.
static std::string percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(q * v.size()))]; };
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"p10\": %.0f, \"p50\": %.0f, \"p90\": %.0f, \"p99\": %.0f}", at(.1), at(.5),
                at(.9), at(.99));
  return buf;
}

struct Variant {
  int block_n;
  int depth;
  uint32_t pace_ns;  // the MMA's time per K step, in ns (0: release at once, loads as fast as they come)
  bool all_sms;      // every SM, or one CTA alone (the unloaded reference)
};

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "tma_loaded.json";
  Report report("tma_loaded");
  report.clock_probe("start");
  const int sms = sm_count();
  uint16_t *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, size_t(kDim) * kDim * 2));
  CK(cudaMalloc(&b, size_t(kDim) * kDim * 2));
  fill_kernel<<<sms * 4, 256>>>(a, kDim, kDim);
  CK_LAUNCH();
  fill_kernel<<<sms * 4, 256>>>(b, kDim, kDim);
  CK_LAUNCH();
  const int max_steps = kWaves * (kDim / kBlockK);
  Stamps st{};
  CK(cudaMalloc(&st.issue, sizeof(uint32_t) * sms * max_steps));
  CK(cudaMalloc(&st.done_a, sizeof(uint32_t) * sms * max_steps));
  CK(cudaMalloc(&st.done_b, sizeof(uint32_t) * sms * max_steps));
  uint32_t* d_bad = nullptr;
  CtaTime* d_times = nullptr;
  CK(cudaMalloc(&d_bad, sizeof(uint32_t) * sms));
  CK(cudaMalloc(&d_times, sizeof(CtaTime) * sms));
  const int max_smem = 200 * 1024;  // the deepest ring below (192 KiB) plus alignment
  CK(cudaFuncSetAttribute(tma_loaded_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));

  // Paces: a 128 x block_n x 64 fp16 MMA step at 4096 FLOP/clk/SM is 1024 (block_n 256) or 512
  // (block_n 128) SM cycles, 663 / 331 ns at the 1545 MHz that a GPU full of tensor-core work holds.
  const Variant variants[] = {
      {256, 4, 663, true}, {256, 3, 663, true}, {256, 2, 663, true}, {256, 4, 663, false},
      {256, 4, 0, true},   {256, 4, 500, true}, {256, 4, 800, true}, {256, 4, 1000, true},  // latency vs load
      {128, 6, 331, true}, {128, 4, 331, true}, {128, 3, 331, true}, {128, 2, 331, true}, {128, 4, 331, false},
  };
  const double probe_mhz = report.last_probe_mhz();
  for (const Variant& v : variants) {
    const Box box_a{kBlockK, kBlockM, true}, box_b{kBlockK, v.block_n, true};
    const CUtensorMap map_a = make_map_2d(a, kDim, kDim, box_a), map_b = make_map_2d(b, kDim, kDim, box_b);
    const int grid = v.all_sms ? sms : 1, steps = max_steps;
    const int smem = v.depth * (box_a.bytes() + box_b.bytes()) + 1024;
    const uint32_t pace = uint32_t(v.pace_ns * probe_mhz / 1e3);
    std::vector<double> lat_a, lat_b, step_cycles;
    std::vector<CtaTime> all;
    int bad_ctas = 0;
    for (int l = 0; l < 3; ++l) {
      tma_loaded_kernel<<<grid, kThreads, smem>>>(map_a, map_b, v.block_n, v.depth, pace, st, d_times, d_bad);
      CK_LAUNCH();
      std::vector<uint32_t> issue(size_t(grid) * steps), da(issue.size()), db(issue.size()), bad(grid);
      std::vector<CtaTime> t(grid);
      CK(cudaMemcpy(issue.data(), st.issue, sizeof(uint32_t) * issue.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(da.data(), st.done_a, sizeof(uint32_t) * da.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(db.data(), st.done_b, sizeof(uint32_t) * db.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(bad.data(), d_bad, sizeof(uint32_t) * grid, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(t.data(), d_times, sizeof(CtaTime) * grid, cudaMemcpyDeviceToHost));
      for (uint32_t x : bad) bad_ctas += x != 0;
      if (l == 0) continue;  // warms L2, not counted
      all.insert(all.end(), t.begin(), t.end());
      for (size_t i = 0; i < issue.size(); ++i) {
        lat_a.push_back(double(da[i] - issue[i]));
        lat_b.push_back(double(db[i] - issue[i]));
      }
      for (const CtaTime& c : t) step_cycles.push_back(double(c.cycles) / steps);
    }
    const uint32_t flags = read_and_clear_error_flags();
    const bool ok = bad_ctas == 0 && flags == 0;
    const CtaSummary s = summarize(all);
    Record r;
    r.str("kind", "loaded_latency").str("pattern", "gemm_8192_two_waves").str("wait", "try_wait_hint")
        .integer("block_m", kBlockM).integer("block_n", v.block_n).integer("block_k", kBlockK)
        .integer("bytes_a", box_a.bytes()).integer("bytes_b", box_b.bytes()).integer("depth", v.depth)
        .integer("pace_ns", v.pace_ns).integer("pace_cycles", pace).num("pace_clock_mhz", probe_mhz)
        .integer("ctas", grid).integer("steps_per_cta", steps).boolean("ok", ok).integer("bad_ctas", bad_ctas)
        .integer("error_flags", flags).boolean("one_cta_per_sm", s.distinct_sms).stats("sm_clock_mhz", s.mhz);
    if (ok) {
      r.stats("latency_a_cycles", stats_of(lat_a)).stats("latency_b_cycles", stats_of(lat_b))
          .raw("latency_a_percentiles", percentiles(lat_a)).raw("latency_b_percentiles", percentiles(lat_b))
          .stats("cycles_per_step", stats_of(step_cycles));
    }
    report.add(r);
  }
  report.clock_probe("end");
  report.write(out_path);
  return 0;
}
