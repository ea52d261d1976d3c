// Shared helpers of the Hopper microbenchmarks: error checks, clocks, statistics, PTX wrappers
// (mbarrier, fences) and a tiny JSON writer. Every benchmark binary writes one JSON document whose
// records each carry "ok": a record whose self-check failed reports no time (see run_suite.py).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t err_ = (x);                                                                        \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,                       \
                   cudaGetErrorString(err_));                                                      \
      std::exit(3);                                                                                \
    }                                                                                              \
  } while (0)

// After every launch: the launch itself and the kernel's execution must both succeed.
#define CK_LAUNCH()                 \
  do {                              \
    CK(cudaGetLastError());         \
    CK(cudaDeviceSynchronize());    \
  } while (0)

// ---------------------------------------------------------------------------------------------
// device helpers
__device__ __forceinline__ uint64_t clock_cycles() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// stmatrix.x4: four 8x8 b16 matrices from a warp's registers to shared memory (smem.cu, fa_consumer.cu)
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes mbarrier.init visible to the async proxy (TMA) and the other threads (CUTLASS fence_barrier_init).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Device-wide failure flag: a wait that times out sets a bit here and the host reports no time.
__device__ uint32_t g_error_flags;

enum ErrorBit : uint32_t { kErrTimeout = 1u, kErrCheck = 2u };

__device__ __forceinline__ bool mbar_test_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits for the phase of `parity` to complete, polling with try_wait (which may suspend the thread
// until the phase completes, as CUTLASS's wait loops do) or with the non-blocking test_wait. Gives up
// after 2^32 SM cycles (about 2 s): a broken TMA or protocol then fails the benchmark instead of
// hanging it. The timeout reads clock64 only every 64 polls; %globaltimer is far too slow to read in
// a wait loop (it put ~700 cycles into every wait of the first run).
template <bool kTestWait = false>
__device__ __forceinline__ bool mbar_wait(uint32_t bar, uint32_t parity) {
  uint64_t start = 0;
  for (uint32_t spin = 0;; ++spin) {
    if (kTestWait ? mbar_test_wait(bar, parity) : mbar_try_wait(bar, parity)) return true;
    if ((spin & 63u) == 63u) {
      const uint64_t now = clock_cycles();
      if (start == 0) {
        start = now;
      } else if (now - start > (1ull << 32)) {
        atomicOr(&g_error_flags, kErrTimeout);
        return false;
      }
    }
  }
}

// try_wait with a suspend-time hint, as CUTLASS's ClusterBarrier::wait (0x989680 ns = 10 ms): the
// thread sleeps until the phase completes and resumes as soon as it does. Without the hint each poll
// of a pending phase returns after ~180-220 SM cycles (test_wait too), so a wait loop observes a
// completion only on that grid (issue 21; bench/results/h200/tma.json, "last_fail_gap").
constexpr uint32_t kSuspendHintNs = 0x989680u;

__device__ __forceinline__ bool mbar_try_wait_hint(uint32_t bar, uint32_t parity, uint32_t hint_ns = kSuspendHintNs) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity), "r"(hint_ns)
      : "memory");
  return done != 0;
}

// mbar_wait with the hint; the same 2^32-cycle timeout.
__device__ __forceinline__ bool mbar_wait_hint(uint32_t bar, uint32_t parity) {
  const uint64_t start = clock_cycles();
  for (;;) {
    if (mbar_try_wait_hint(bar, parity)) return true;
    if (clock_cycles() - start > (1ull << 32)) {
      atomicOr(&g_error_flags, kErrTimeout);
      return false;
    }
  }
}

__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// SM clock under a light load: one thread per SM spins ~2 ms on globaltimer.
__global__ void clock_probe_kernel(uint64_t* out) {
  if (threadIdx.x != 0) return;
  const uint64_t g0 = global_ns(), c0 = clock_cycles();
  uint64_t g1 = g0;
  while (g1 - g0 < 2000000ull) g1 = global_ns();
  const uint64_t c1 = clock_cycles();
  out[2 * blockIdx.x] = c1 - c0;
  out[2 * blockIdx.x + 1] = g1 - g0;
}

// ---------------------------------------------------------------------------------------------
// host helpers
struct Stats {
  double median = 0, min = 0, max = 0;
  size_t n = 0;
};

inline Stats stats_of(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = (v.size() % 2) ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

inline int sm_count() {
  int dev = 0, n = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

inline uint32_t read_and_clear_error_flags() {
  uint32_t flags = 0, zero = 0;
  CK(cudaMemcpyFromSymbol(&flags, g_error_flags, sizeof(flags)));
  CK(cudaMemcpyToSymbol(g_error_flags, &zero, sizeof(zero)));
  return flags;
}

// One JSON object built field by field; values are encoded when added.
class Record {
 public:
  Record& str(const std::string& key, const std::string& value) {
    fields_.emplace_back(key, quote(value));
    return *this;
  }
  Record& num(const std::string& key, double value) {
    char buf[64];
    if (std::isfinite(value))
      std::snprintf(buf, sizeof buf, "%.10g", value);
    else
      std::snprintf(buf, sizeof buf, "null");
    fields_.emplace_back(key, buf);
    return *this;
  }
  Record& integer(const std::string& key, long long value) {
    fields_.emplace_back(key, std::to_string(value));
    return *this;
  }
  Record& boolean(const std::string& key, bool value) {
    fields_.emplace_back(key, value ? "true" : "false");
    return *this;
  }
  Record& stats(const std::string& key, const Stats& s) {
    Record r;
    r.num("median", s.median).num("min", s.min).num("max", s.max).integer("n", static_cast<long long>(s.n));
    fields_.emplace_back(key, r.dump());
    return *this;
  }
  Record& raw(const std::string& key, const std::string& json) {
    fields_.emplace_back(key, json);
    return *this;
  }
  std::string dump() const {
    std::string out = "{";
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (i) out += ", ";
      out += quote(fields_[i].first) + ": " + fields_[i].second;
    }
    return out + "}";
  }
  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    return out + "\"";
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// The whole output of one binary: device facts, clocks seen, then one record per measurement.
class Report {
 public:
  explicit Report(const std::string& bench) : bench_(bench) {}
  void add(const Record& r) {
    records_.push_back(r.dump());
    std::printf("%s\n", records_.back().c_str());
    std::fflush(stdout);
  }
  void clock_probe(const char* when) {
    const int sms = sm_count();
    uint64_t* d = nullptr;
    CK(cudaMalloc(&d, sizeof(uint64_t) * 2 * sms));
    clock_probe_kernel<<<sms, 32>>>(d);
    CK_LAUNCH();
    std::vector<uint64_t> h(2 * sms);
    CK(cudaMemcpy(h.data(), d, sizeof(uint64_t) * 2 * sms, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    std::vector<double> mhz;
    for (int i = 0; i < sms; ++i) mhz.push_back(1e3 * double(h[2 * i]) / double(h[2 * i + 1]));
    Record r;
    const Stats st = stats_of(mhz);
    r.str("when", when).stats("sm_clock_mhz", st);
    clocks_.push_back(r.dump());
    last_mhz_ = st.median;
  }
  // Median SM clock of the latest clock_probe (a light load: one thread per SM).
  double last_probe_mhz() const { return last_mhz_; }
  void write(const char* path) const {
    cudaDeviceProp prop{};
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    int clock_khz = 0, mem_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev);
    Record device;
    device.str("name", prop.name)
        .integer("sms", prop.multiProcessorCount)
        .integer("cc_major", prop.major)
        .integer("cc_minor", prop.minor)
        .integer("l2_bytes", prop.l2CacheSize)
        .integer("smem_per_block_optin", static_cast<long long>(prop.sharedMemPerBlockOptin))
        .integer("max_clock_khz", clock_khz)
        .integer("mem_clock_khz", mem_khz);
    std::string clocks = "[";
    for (size_t i = 0; i < clocks_.size(); ++i) clocks += (i ? ", " : "") + clocks_[i];
    clocks += "]";
    std::string recs = "[\n";
    for (size_t i = 0; i < records_.size(); ++i) recs += (i ? ",\n  " : "  ") + records_[i];
    recs += "\n]";
    FILE* f = std::fopen(path, "w");
    if (!f) {
      std::perror(path);
      std::exit(4);
    }
    std::fprintf(f, "{\"bench\": %s, \"device\": %s, \"clock_probes\": %s, \"records\": %s}\n",
                 Record::quote(bench_).c_str(), device.dump().c_str(), clocks.c_str(), recs.c_str());
    std::fclose(f);
  }

 private:
  std::string bench_;
  std::vector<std::string> records_;
  std::vector<std::string> clocks_;
  double last_mhz_ = 0;
};

// Per-CTA timing of a throughput kernel: cycles on the CTA's own SM clock and wall-clock ns.
struct CtaTime {
  uint64_t cycles;
  uint64_t ns;
  uint32_t smid;
  uint32_t pad;
};

// Median cycles over CTAs, the implied SM clock, and whether every CTA ran on its own SM.
struct CtaSummary {
  Stats cycles;
  Stats mhz;
  bool distinct_sms = true;
};

inline CtaSummary summarize(const std::vector<CtaTime>& t) {
  CtaSummary s;
  std::vector<double> cyc, mhz;
  std::vector<uint32_t> ids;
  for (const auto& x : t) {
    cyc.push_back(double(x.cycles));
    if (x.ns) mhz.push_back(1e3 * double(x.cycles) / double(x.ns));
    ids.push_back(x.smid);
  }
  std::sort(ids.begin(), ids.end());
  s.distinct_sms = std::adjacent_find(ids.begin(), ids.end()) == ids.end();
  s.cycles = stats_of(cyc);
  s.mhz = stats_of(mhz);
  return s;
}

__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// wgmma is .aligned: all four warps of a streaming warpgroup must leave its loop after the same group, so thread 0's
// reading of the stop condition is shared through shared memory between two named barriers (id 3).
// (bench/gpu/fa_consumer.cu and wgmma_queue.cu; a warp leaving on its own reading ends in "illegal instruction".)
__device__ __forceinline__ bool warpgroup_agrees(int wtid, bool thread0_says, volatile int& shared) {
  if (wtid == 0) shared = thread0_says;
  bar_sync(3, 128);
  const bool agreed = shared != 0;
  bar_sync(3, 128);
  return agreed;
}

// Shared memory that keeps a second CTA off the SM, so a grid of `sms` CTAs puts one on each SM.
constexpr int kOneCtaPerSmSmem = 120 * 1024;
