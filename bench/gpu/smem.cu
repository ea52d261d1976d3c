// Shared-memory bandwidth on Hopper, per SM, and whether the tensor cores' SMEM operand reads share it.
//
//   alone:       one CTA per SM, W warps (W = 4..32) issue back-to-back shared-memory accesses of one
//                kind: ld.shared.v4.u32, st.shared.v4.u32, ldmatrix.x4, stmatrix.x4 (each warp moves
//                512 bytes per instruction, bank-conflict free); bytes per SM clock.
//   with wgmma:  warpgroup 0 issues back-to-back wgmma m64n64k16 SS fp16 chains (A 2 KiB + B 2 KiB of
//                SMEM per 32-cycle instruction: 128 B/clk at full rate) while warpgroups 1..3 run
//                ld.shared.v4 (or ldmatrix.x4) for as long; both rates are reported with and without
//                the other. If SMEM bandwidth is one resource, the sum of the two byte rates cannot
//                exceed the loads' rate alone.
//
// Check: SMEM holds word w = hash(w); every load kernel returns each thread's sum of the words it
// read, compared with the host's sum over the same addresses (ldmatrix hands a warp the same words
// as the 512 bytes it reads, so the warp's sum is checked). Stores write value(i, thread) and the
// final contents are compared with the host's last writer of each word. wgmma: A = B = 1, every
// accumulator element must equal 16 x the number of wgmmas. A mismatch reports no time.
#include "common.cuh"
#include "wgmma_ops.cuh"

constexpr int kBufBytes = 64 * 1024;  // the region the accesses sweep (plus the wgmma operands)
constexpr int kBufWords = kBufBytes / 4;
constexpr int kOpBytes = 8192;        // wgmma A (2 KiB) + B (2 KiB), padded

enum Op : int { kLd = 0, kSt = 1, kLdm = 2, kStm = 3, kBulk = 4 };
constexpr const char* kOpNames[5] = {"ld.shared.v4", "st.shared.v4", "ldmatrix.x4", "stmatrix.x4",
                                     "cp.async.bulk (TMA) global->shared"};
// kBulk: one thread keeps a ring of 4 x 16 KiB bulk copies (the TMA engine) from an L2-resident 4 MiB
// global region into the 64 KiB region in flight, as a GEMM's producer does; the wgmma warpgroup beside
// it then shows whether TMA writes and wgmma operand reads share shared-memory bandwidth.
constexpr int kBulkBytes = 16384, kBulkSlots = kBufBytes / kBulkBytes, kBulkTiles = 256;

__host__ __device__ __forceinline__ uint32_t word_hash(uint32_t w) {
  uint32_t h = w * 0x9E3779B1u;
  h ^= h >> 16;
  return h & 0xFFFFu;  // small: sums of millions of words stay exact in uint32 modulo 2^32 anyway
}

// Byte offset of the 16-byte chunk that lane `lane` of warp `warp` touches in iteration i: each warp
// sweeps its own 512-byte block through the region, consecutive lanes on consecutive 16-byte chunks
// (no bank conflicts).
__host__ __device__ __forceinline__ uint32_t chunk_offset(int warp, int warps, int i, int lane) {
  const uint32_t block = uint32_t(warp + i * warps) % uint32_t(kBufBytes / 512);
  return block * 512 + uint32_t(lane) * 16;
}

__device__ __forceinline__ void lds_v4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void sts_v4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((saddr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

__host__ __device__ __forceinline__ uint32_t bulk_tile(int cta, int i) { return uint32_t(cta * 37 + i) % kBulkTiles; }

struct Out {
  uint64_t mem_cycles;   // cycles of the SMEM-access warps (slowest warp of the CTA, from the common start)
  uint64_t mma_cycles;   // cycles of the wgmma warpgroup
  uint64_t ns;
  uint32_t smid, mma_bad;
};

// `mem_warps` warps starting at warp `first_mem_warp` run `iters` accesses of `op`; with `mma_iters` > 0
// warpgroup 0 runs mma_iters wgmmas (groups of 8, one group in flight) meanwhile.
template <bool kMma>
__global__ void __launch_bounds__(kMma ? 512 : 1024, 1)
    smem_kernel(int op, int mem_warps, int first_mem_warp, int iters, int mma_iters, Out* out, uint32_t* sums,
                const uint32_t* src) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* buf = smem_raw;                 // kBufBytes
  uint8_t* ops = smem_raw + kBufBytes;     // wgmma A and B, all fp16 1.0
  __shared__ unsigned long long t_mem_end, t_mma_end;
  __shared__ unsigned long long t_start;
  __shared__ uint32_t mma_bad;
  __shared__ __align__(8) uint64_t bulk_bars[kBulkSlots];
  __shared__ uint32_t slot_sum[kBulkSlots];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  uint32_t* words = reinterpret_cast<uint32_t*>(buf);
  for (int w = tid; w < kBufWords; w += blockDim.x) words[w] = word_hash(uint32_t(w));
  for (int i = tid; i < kOpBytes / 2; i += blockDim.x) reinterpret_cast<uint16_t*>(ops)[i] = 0x3C00u;  // fp16 1.0
  if (tid == 0) {
    t_mem_end = 0;
    t_mma_end = 0;
    mma_bad = 0;
    for (int j = 0; j < kBulkSlots; ++j) {
      mbar_init(smem_addr(&bulk_bars[j]), 1);
      slot_sum[j] = 0;
    }
    mbar_fence_init();
  }
  fence_proxy_async_smem();
  __syncthreads();
  if (tid == 0) t_start = clock_cycles();
  __syncthreads();
  const uint64_t c0 = t_start, g0 = global_ns();
  const int mw = warp - first_mem_warp;
  if (kMma && warp < 4) {
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    const uint32_t a = smem_addr(ops), b = smem_addr(ops + 2048);
    const uint64_t da = make_desc(a, 128, 256), db = make_desc(b, 128, 256);
    for (int g = 0; g < mma_iters / 8; ++g) {
      wg_fence();
#pragma unroll
      for (int k = 0; k < 8; ++k) wgmma_ss<64, 0>(d, da, db, 1);
      wg_commit();
      wg_wait1();
    }
    wg_wait0();
    uint32_t bad = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i) bad += d[i] != 16.f * float(mma_iters / 8 * 8);
    if (bad) atomicAdd(&mma_bad, bad);
    atomicMax(&t_mma_end, (unsigned long long)clock_cycles());
  } else if (mw >= 0 && mw < mem_warps) {
    uint32_t s = 0;
    if (op == kBulk) {
      if (mw == 0 && lane == 0) {
        bool ok = true;
        for (int i = 0; i < iters && ok; ++i) {
          const int slot = i % kBulkSlots;
          const uint32_t bar = smem_addr(&bulk_bars[slot]);
          if (i >= kBulkSlots) ok = mbar_wait_hint(bar, uint32_t((i / kBulkSlots - 1) & 1));
          mbar_arrive_expect_tx(bar, kBulkBytes);
          bulk_g2s(smem_addr(buf + slot * kBulkBytes), src + size_t(bulk_tile(blockIdx.x, i)) * (kBulkBytes / 4),
                   kBulkBytes, bar);
        }
        for (int i = iters - kBulkSlots; i < iters && ok; ++i)  // drain
          ok = mbar_wait_hint(smem_addr(&bulk_bars[i % kBulkSlots]), uint32_t((i / kBulkSlots) & 1));
      }
      __syncwarp();
    } else if (op == kLd) {
      for (int i = 0; i < iters; ++i) {
        uint32_t r[4];
        lds_v4(smem_addr(buf + chunk_offset(mw, mem_warps, i, lane)), r);
        s += r[0] + r[1] + r[2] + r[3];
      }
    } else if (op == kLdm) {
      for (int i = 0; i < iters; ++i) {
        uint32_t r[4];
        ldmatrix_x4(smem_addr(buf + chunk_offset(mw, mem_warps, i, lane)), r);
        s += r[0] + r[1] + r[2] + r[3];
      }
    } else if (op == kSt) {
      for (int i = 0; i < iters; ++i) {
        const uint32_t v = uint32_t(i) * 0x10001u + uint32_t(mw * 32 + lane);
        const uint32_t r[4] = {v, v + 1, v + 2, v + 3};
        sts_v4(smem_addr(buf + chunk_offset(mw, mem_warps, i, lane)), r);
      }
    } else {
      for (int i = 0; i < iters; ++i) {
        const uint32_t v = uint32_t(i) * 0x10001u + uint32_t(mw * 32 + lane);
        const uint32_t r[4] = {v, v + 1, v + 2, v + 3};
        stmatrix_x4(smem_addr(buf + chunk_offset(mw, mem_warps, i, lane)), r);
      }
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) sums[blockIdx.x * 32 + mw] = s;
    atomicMax(&t_mem_end, (unsigned long long)clock_cycles());
  }
  __syncthreads();
  if (op == kBulk) {  // every slot holds the last tile copied into it
    for (int w = tid; w < kBufWords; w += blockDim.x) atomicAdd(&slot_sum[w / (kBulkBytes / 4)], words[w]);
    __syncthreads();
    if (tid < kBulkSlots) sums[blockIdx.x * 32 + tid] = slot_sum[tid];
  }
  if (tid == 0) {
    out[blockIdx.x] = Out{t_mem_end ? t_mem_end - c0 : 0, t_mma_end ? t_mma_end - c0 : 0, global_ns() - g0, sm_id(),
                          mma_bad};
  }
  // stores: copy the final contents out for the host's check (CTA 0 only)
  if (blockIdx.x == 0 && (op == kSt || op == kStm))
    for (int w = tid; w < kBufWords; w += blockDim.x) sums[gridDim.x * 32 + w] = words[w];
}

// Host: the word sum a warp's loads see, and the final contents after the stores.
static uint32_t host_load_sum(int mw, int warps, int iters) {
  uint32_t s = 0;
  for (int i = 0; i < iters; ++i)
    for (int lane = 0; lane < 32; ++lane) {
      const uint32_t off = chunk_offset(mw, warps, i, lane) / 4;
      for (int k = 0; k < 4; ++k) s += word_hash(off + k);
    }
  return s;
}

static std::vector<uint32_t> host_store_image(int op, int warps, int iters) {
  std::vector<uint32_t> img(kBufWords);
  for (int w = 0; w < kBufWords; ++w) img[w] = word_hash(uint32_t(w));
  for (int i = 0; i < iters; ++i)
    for (int mw = 0; mw < warps; ++mw)
      for (int lane = 0; lane < 32; ++lane) {
        const uint32_t v = uint32_t(i) * 0x10001u + uint32_t(mw * 32 + lane);
        if (op == kSt) {
          const uint32_t off = chunk_offset(mw, warps, i, lane) / 4;
          for (int k = 0; k < 4; ++k) img[off + k] = v + k;
        } else {
          // stmatrix.x4: lane l gives the address of row l (matrix l / 8, row l % 8); word c of row r of
          // matrix j comes from register j of lane 4 * (r % 8) + c of the same warp.
          const int j = lane / 8, r = lane % 8;
          const uint32_t row = chunk_offset(mw, warps, i, lane) / 4;
          for (int c = 0; c < 4; ++c) {
            const uint32_t src_lane = uint32_t(4 * r + c);
            img[row + c] = uint32_t(i) * 0x10001u + uint32_t(mw * 32) + src_lane + uint32_t(j);
          }
        }
      }
  return img;
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "smem.json";
  Report rep("smem");
  rep.clock_probe("start");
  const int sms = sm_count();
  const int dyn = kBufBytes + kOpBytes + 1024;
  CK(cudaFuncSetAttribute(smem_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, std::max(dyn, kOneCtaPerSmSmem)));
  CK(cudaFuncSetAttribute(smem_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, std::max(dyn, kOneCtaPerSmSmem)));
  Out* d_out = nullptr;
  uint32_t* d_sums = nullptr;
  CK(cudaMalloc(&d_out, sizeof(Out) * sms));
  CK(cudaMalloc(&d_sums, sizeof(uint32_t) * (sms * 32 + kBufWords)));
  const int smem_bytes = std::max(dyn, kOneCtaPerSmSmem);
  std::vector<uint32_t> h_src(size_t(kBulkTiles) * kBulkBytes / 4);
  for (size_t w = 0; w < h_src.size(); ++w) h_src[w] = word_hash(uint32_t(w) ^ 0x5555u);
  std::vector<uint32_t> tile_sum(kBulkTiles, 0);
  for (size_t w = 0; w < h_src.size(); ++w) tile_sum[w / (kBulkBytes / 4)] += h_src[w];
  uint32_t* d_src = nullptr;
  CK(cudaMalloc(&d_src, sizeof(uint32_t) * h_src.size()));
  CK(cudaMemcpy(d_src, h_src.data(), sizeof(uint32_t) * h_src.size(), cudaMemcpyHostToDevice));

  struct Cfg {
    int op, mem_warps, mma_iters;
  };
  std::vector<Cfg> cfgs;
  for (int op = 0; op < 4; ++op)
    for (int w : {4, 8, 16, 32}) cfgs.push_back({op, w, 0});
  // with wgmma on warpgroup 0: loads on 12 warps (warpgroups 1-3), alone and together, and wgmma alone
  for (int op : {kLd, kLdm}) cfgs.push_back({op, 12, 0}), cfgs.push_back({op, 12, 1});
  cfgs.push_back({kLd, 0, 1});
  cfgs.push_back({kBulk, 1, 0});
  cfgs.push_back({kBulk, 1, 1});

  for (const Cfg& c : cfgs) {
    const bool with_mma = c.mma_iters > 0;
    const int first = with_mma ? 4 : 0;
    const int threads = with_mma ? 512 : c.mem_warps * 32;
    const int iters = 8192;
    // wgmma count chosen so both sides run for about as long (the loads alone at ~128 B/clk)
    // (bulk copies: 16 KiB per iteration at ~100 B/clk)
    const int mma_iters = !with_mma ? 0
                          : c.op == kBulk ? iters * (kBulkBytes / 100) / 32 / 8 * 8
                                          : std::max(8, (c.mem_warps ? c.mem_warps * 512 * iters / 128 / 32 : 16384) / 8 * 8);
    const double mem_bytes = c.op == kBulk ? double(kBulkBytes) * iters : double(c.mem_warps) * 512.0 * iters;
    std::vector<Out> all;
    int wrong = 0, mma_bad = 0;
    for (int l = 0; l <= 3; ++l) {
      if (with_mma)
        smem_kernel<true><<<sms, threads, smem_bytes>>>(c.op, c.mem_warps, first, iters, mma_iters, d_out, d_sums, d_src);
      else
        smem_kernel<false><<<sms, threads, smem_bytes>>>(c.op, c.mem_warps, first, iters, 0, d_out, d_sums, d_src);
      CK_LAUNCH();
      std::vector<Out> o(sms);
      CK(cudaMemcpy(o.data(), d_out, sizeof(Out) * sms, cudaMemcpyDeviceToHost));
      for (const Out& x : o) mma_bad += x.mma_bad != 0;
      if (l == 0 && c.mem_warps > 0) {  // check the first launch
        std::vector<uint32_t> h(sms * 32 + kBufWords);
        CK(cudaMemcpy(h.data(), d_sums, sizeof(uint32_t) * h.size(), cudaMemcpyDeviceToHost));
        if (c.op == kBulk) {
          for (int b = 0; b < sms; ++b)
            for (int j = 0; j < kBulkSlots; ++j) {
              const int last = iters - kBulkSlots + ((j - (iters - kBulkSlots)) % kBulkSlots + kBulkSlots) % kBulkSlots;
              wrong += h[b * 32 + j] != tile_sum[bulk_tile(b, last)];
            }
        } else if (c.op == kLd || c.op == kLdm) {
          for (int mw = 0; mw < c.mem_warps; ++mw) {
            const uint32_t want = host_load_sum(mw, c.mem_warps, iters);
            for (int b = 0; b < sms; ++b) wrong += h[b * 32 + mw] != want;
          }
        } else {
          const std::vector<uint32_t> img = host_store_image(c.op, c.mem_warps, iters);
          for (int w = 0; w < kBufWords; ++w) wrong += h[sms * 32 + w] != img[w];
        }
      }
      if (l > 0) all.insert(all.end(), o.begin(), o.end());
    }
    const uint32_t flags = read_and_clear_error_flags();
    const bool ok = wrong == 0 && mma_bad == 0 && flags == 0;
    std::vector<double> mem_bpc, mma_fpc, mhz;
    for (const Out& x : all) {
      if (x.mem_cycles) mem_bpc.push_back(mem_bytes / double(x.mem_cycles));
      if (x.mma_cycles) mma_fpc.push_back(double(mma_iters) * 2.0 * 64 * 64 * 16 / double(x.mma_cycles));
      const uint64_t cyc = std::max(x.mem_cycles, x.mma_cycles);
      if (x.ns) mhz.push_back(1e3 * double(cyc) / double(x.ns));
    }
    Record r;
    r.str("kind", with_mma ? "with_wgmma" : "alone").str("op", c.mem_warps ? kOpNames[c.op] : "none")
        .integer("mem_warps", c.mem_warps).integer("iters", iters)
        .integer(c.op == kBulk ? "bytes_per_copy" : "bytes_per_warp_instr", c.op == kBulk ? kBulkBytes : 512)
        .integer("wgmmas", mma_iters).str("wgmma", with_mma ? "m64n64k16 SS fp16, groups of 8, one in flight" : "none")
        .boolean("ok", ok).integer("wrong", wrong).integer("wgmma_bad_ctas", mma_bad).integer("error_flags", flags)
        .stats("sm_clock_mhz", stats_of(mhz));
    if (ok) {
      if (!mem_bpc.empty()) r.stats("smem_bytes_per_clk_per_sm", stats_of(mem_bpc));
      if (!mma_fpc.empty()) {
        r.stats("wgmma_flops_per_clk_per_sm", stats_of(mma_fpc));
        // SMEM bytes the wgmmas read: A 2 KiB + B 2 KiB per m64n64k16 (131072 FLOP)
        std::vector<double> op_bpc;
        for (double f : mma_fpc) op_bpc.push_back(f * 4096.0 / 131072.0);
        r.stats("wgmma_operand_bytes_per_clk_per_sm", stats_of(op_bpc));
      }
    }
    rep.add(r);
  }
  rep.clock_probe("end");
  rep.write(out_path);
  return 0;
}
