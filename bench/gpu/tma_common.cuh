// TMA helpers shared by tma.cu and tma_loaded.cu: hashed test tensors, tensor maps, 2-D tile loads
// completing on an mbarrier, and CTA-wide tile sums for the self-checks.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include "common.cuh"

__host__ __device__ __forceinline__ uint32_t hash_at(uint32_t x, uint32_t y) {
  uint32_t h = x * 0x9E3779B1u ^ (y + 0x7F4A7C15u) * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 13;
  return h & 0xFFFFu;
}

// Element (x, y) of a row-major `width` x `rows` uint16 tensor holds hash_at(x, y).
__global__ void fill_kernel(uint16_t* p, int width, int rows) {
  const size_t n = size_t(width) * rows;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint16_t(hash_at(uint32_t(i % width), uint32_t(i / width)));
}

struct Box {
  int bx, by;     // elements along the row, rows
  bool swizzle;   // 128-byte swizzle (bx * 2 == 128) or none
  int bytes() const { return bx * by * 2; }
};

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// Sum of the uint16 words of a tile in shared memory (layout-agnostic), by the whole CTA.
// Sum of every thread's partial sum s, by the whole CTA (warp shuffles, then one atomic per warp).
__device__ uint32_t cta_sum(uint32_t s, uint32_t* scratch) {
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
  if (threadIdx.x == 0) *scratch = 0;
  __syncthreads();
  if (threadIdx.x % 32 == 0) atomicAdd(scratch, s);
  __syncthreads();
  const uint32_t total = *scratch;
  __syncthreads();
  return total;
}

__device__ uint32_t smem_tile_sum(const uint16_t* tile, int words, uint32_t* scratch) {
  uint32_t s = 0;
  for (int i = threadIdx.x; i < words; i += blockDim.x) s += tile[i];
  return cta_sum(s, scratch);
}

__device__ uint32_t expected_tile_sum(int x0, int y0, int bx, int by, uint32_t* scratch) {
  uint32_t s = 0;
  for (int i = threadIdx.x; i < bx * by; i += blockDim.x) s += hash_at(uint32_t(x0 + i % bx), uint32_t(y0 + i / bx));
  return cta_sum(s, scratch);
}

// Whether the bx x by tile in shared memory at `tile` holds hash_at over the box at (x0, y0), by the whole CTA.
__device__ bool tile_matches(const uint8_t* tile, int x0, int y0, int bx, int by, uint32_t* scratch) {
  return smem_tile_sum(reinterpret_cast<const uint16_t*>(tile), bx * by, scratch) ==
         expected_tile_sum(x0, y0, bx, by, scratch);
}

// The step whose tile sits in ring slot `slot` after `steps` steps through a ring of `depth` slots
// (step s goes to slot s % depth): what each slot's self-check compares against.
__host__ __device__ __forceinline__ int last_step_in_slot(int slot, int steps, int depth) {
  return steps - depth + ((slot - (steps - depth) % depth) + depth) % depth;
}

__device__ __forceinline__ uint8_t* align_1024(uint8_t* p) {
  const uint32_t a = smem_addr(p);
  return p + ((1024 - (a & 1023)) & 1023);
}


static PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !fn) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
    std::exit(6);
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// A 2-D tensor map over a row-major `width` x `rows` uint16 tensor, promoting L2 fills to 256 B.
static CUtensorMap make_map_2d(uint16_t* base, int width, int rows, const Box& box) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(width), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(width) * 2};
  const cuuint32_t boxdim[2] = {cuuint32_t(box.bx), cuuint32_t(box.by)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, base, dims, strides, boxdim, estr,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 box.swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d) for box %dx%d\n", int(r), box.bx, box.by);
    std::exit(6);
  }
  return map;
}
