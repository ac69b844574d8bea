// Lesson 03 — inclusive scan (prefix sum): y[i] = x[0] + ... + x[i], fp32 and int32.
//
// int32 wraps mod 2^32 (exact, the reference wraps the same way); fp32 is checked with
// a tolerance per element, that of a float sum of the element's prefix (reductions.cuh).
//
// Versions:
//   v1_scan_then_propagate  each block scans 1024 elements (thread-serial over 4, then
//                           warp shuffles) and writes its total; the totals are scanned
//                           the same way (recursively); a third kernel adds each block's
//                           prefix. Reads x and y once each, writes y twice: 2x the minimum traffic
//   v2_decoupled_lookback   one pass (read x once, write y once), as CUB does: tiles take
//                           an id from an atomic counter (so a tile's predecessors are
//                           already running: no deadlock), publish their total at once,
//                           then look back over the predecessors' published totals (32 at
//                           a time, one per lane) until one with a full inclusive prefix
//   v3_reg_tiles_backoff    v2 with 8192-element tiles scanned in registers (16-byte loads,
//                           warp shuffles, no shared-memory tile), and a look-back that waits
//                           only for the tiles it needs and sleeps between polls
//   cub                     cub::DeviceScan::InclusiveSum
//
// Determinism: v1 is deterministic. v2, v3 and CUB are not bitwise reproducible for fp32:
// how far a tile looks back (which predecessors have published a full prefix yet)
// depends on timing, and that changes the order of the fp32 additions. int32 is exact.
//
// Run:  klab test 03 --op scan     klab bench 03 --op scan
#include <cub/device/device_scan.cuh>
#include <cuda/atomic>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "klab/device/warp.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "reductions.cuh"

namespace {

using klab::DType;
using klab::Problem;
using klab::TensorSpec;
using lesson03::vec4_t;

// ---------------------------------------------------------------------------------------
// CPU reference
// ---------------------------------------------------------------------------------------

klab::Reference scan_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t n = p.shape[0];
  klab::RefArray y(static_cast<std::size_t>(n));
  if (p.dtype == DType::i32) {
    const std::int32_t* x = in.tensors[0].as<std::int32_t>();
    std::uint32_t s = 0;  // wraps mod 2^32, like the kernels
    for (std::int64_t i = 0; i < n; ++i) {
      s += static_cast<std::uint32_t>(x[i]);
      y[i] = static_cast<double>(static_cast<std::int32_t>(s));
    }
  } else {
    const float* x = in.tensors[0].as<float>();
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) y[i] = (s += x[i]);
  }
  return klab::single_output(std::move(y));
}

// ---------------------------------------------------------------------------------------
// Op spec: shapes, validation, tolerances
// ---------------------------------------------------------------------------------------

klab::Op make_scan_op() {
  klab::Op op;
  op.lesson = "03";
  op.name = "scan";
  op.summary = "inclusive prefix sum (f32 with a tolerance per prefix length, i32 exact mod 2^32)";
  op.dims = {"n"};
  op.dtypes = {DType::f32, DType::i32};
  // Around the tile sizes (1024 for v1, 4096 for v2, 8192 for v3): one short of, exactly,
  // one past. 1048577 makes v1 recurse twice (1025, then 2 block totals). Past 2^31
  // elements (8 GiB per dtype): tile bases and flat indices must be 64-bit (v2 runs over
  // 2^19 tiles, v1 recurses three times).
  op.test_shapes = {{0},    {1},    {2},    {7},     {127},   {1023},  {1024},    {1025},
                    {4095}, {4096}, {4097}, {8191},  {8193},  {65537}, {1048577}, {1000003},
                    {(1 << 24) + 3}, {(std::int64_t{1} << 31) + 17}};
  op.bench_shapes = {{1 << 24}, {1 << 28}};
  op.baseline = "cub";
  op.tour = {"v1_scan_then_propagate", "v3_reg_tiles_backoff"};
  op.validate = lesson03::validate_1d;
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", p.dtype, p.shape}}; };
  op.reference = scan_ref;
  op.tolerance = [](const Problem& p, int) {
    return p.dtype == DType::i32 ? klab::Tolerance{0, 0} : lesson03::float_scan_tolerance(p.shape[0]);
  };
  op.flops = [](const Problem& p) { return static_cast<double>(p.shape[0]); };
  return op;
}

// ---------------------------------------------------------------------------------------
// Kernels (In = float or int; A = float or unsigned int, see reductions.cuh)
// ---------------------------------------------------------------------------------------

template <class A>
__device__ __forceinline__ A warp_inclusive_scan(A v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const A t = __shfl_up_sync(klab::kFullMask, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

constexpr int kThreads = 256;
static_assert(kThreads == 256, "block_exclusive_scan scans 8 warp totals in warp 0");

// Exclusive scan over the block of one value per thread; also returns the block total.
// blockDim.x == kThreads == 256 (8 warps).
template <class A>
__device__ __forceinline__ A block_exclusive_scan(A v, A& total) {
  __shared__ A s_warp[8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const A incl = warp_inclusive_scan(v);
  A excl = __shfl_up_sync(klab::kFullMask, incl, 1);  // exclusive without a subtraction (exact for fp32)
  if (lane == 0) excl = 0;
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    A w = lane < 8 ? s_warp[lane] : A(0);
    w = warp_inclusive_scan(w);
    if (lane < 8) s_warp[lane] = w;
  }
  __syncthreads();
  total = s_warp[7];
  const A before = warp > 0 ? s_warp[warp - 1] : A(0);
  __syncthreads();  // s_warp is reused by the next call
  return excl + before;
}

// v1_scan_then_propagate: a block scans 1024 elements, 4 consecutive ones per thread.
constexpr int kV1Items = 4, kV1Tile = kThreads * kV1Items;
static_assert(kV1Items >= 1 && kV1Items <= 16, "v1: a thread's items are held in registers");

template <class In, class A>
__global__ void scan_v1_scan_then_propagate_block(const In* __restrict__ g_in, A* __restrict__ g_out,
                                                  A* __restrict__ g_sums, std::int64_t n) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kV1Tile + threadIdx.x * kV1Items;
  A r_incl[kV1Items];
  A run = 0;
#pragma unroll
  for (int k = 0; k < kV1Items; ++k) {
    run += (first + k < n) ? static_cast<A>(g_in[first + k]) : A(0);
    r_incl[k] = run;  // inclusive within the thread
  }
  A total;
  const A offset = block_exclusive_scan(run, total);
#pragma unroll
  for (int k = 0; k < kV1Items; ++k)
    if (first + k < n) g_out[first + k] = r_incl[k] + offset;
  if (g_sums != nullptr && threadIdx.x == 0) g_sums[blockIdx.x] = total;
}

// v1, third kernel: block b >= 1 of the output adds the inclusive prefix of blocks 0..b-1.
template <class A>
__global__ void scan_v1_scan_then_propagate_add(A* __restrict__ g_out, const A* __restrict__ g_sums, std::int64_t n) {
  const std::int64_t b = static_cast<std::int64_t>(blockIdx.x) + 1;  // block 0 needs nothing
  const A add = g_sums[b - 1];
  const std::int64_t first = b * kV1Tile;
  for (int k = threadIdx.x; k < kV1Tile; k += kThreads)
    if (first + k < n) g_out[first + k] += add;
}

// v2_decoupled_lookback: tiles of 4096 elements (256 threads x 16).
constexpr int kItems = 16, kTile = kThreads * kItems;
static_assert(kItems >= 1 && kItems <= 16, "v2: a thread's items are held in registers");
static_assert(kTile % (4 * kThreads) == 0 && kTile % 32 == 0, "v2: whole 16-byte loads per thread, whole pad words");
constexpr unsigned long long kFlagAggregate = 1ull << 32, kFlagInclusive = 2ull << 32;

// The tile in shared memory gets one padding word per 32, so that both access patterns
// are conflict-free: striped (thread t touches element 4t + c of a 1024 run) and blocked
// (thread t touches 16t + k: without padding 16t hits only banks 0 and 16).
__device__ __forceinline__ int padded(int i) { return i + (i >> 5); }

template <class A>
__device__ __forceinline__ unsigned bits_of(A v) {
  if constexpr (sizeof(A) == 4 && std::is_same_v<A, float>) return __float_as_uint(v);
  else return static_cast<unsigned>(v);
}
template <class A>
__device__ __forceinline__ A value_of(unsigned long long w) {
  const unsigned b = static_cast<unsigned>(w & 0xffffffffull);
  if constexpr (std::is_same_v<A, float>) return __uint_as_float(b);
  else return static_cast<A>(b);
}

template <class In, class A>
__global__ void __launch_bounds__(kThreads)
    scan_v2_decoupled_lookback(const In* __restrict__ g_in, A* __restrict__ g_out, std::int64_t n,
                               unsigned long long* g_status, unsigned int* g_ticket, bool aligned) {
  using V = vec4_t<A>;
  __shared__ A s_tile[kTile + kTile / 32];
  __shared__ unsigned int s_id;
  __shared__ A s_prefix;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Tile ids in the order blocks start, not blockIdx order: every tile we wait on below
  // has started already, so it will publish (no deadlock whatever the scheduler does).
  if (tid == 0) s_id = atomicAdd(g_ticket, 1u);
  __syncthreads();
  const std::int64_t tile = s_id;
  const std::int64_t base = tile * kTile;
  const std::int64_t valid = (n - base < kTile) ? n - base : kTile;

  // 1. Load striped (coalesced), into shared memory.
  if (valid == kTile && aligned) {
#pragma unroll
    for (int j = 0; j < kTile / (4 * kThreads); ++j) {
      const int e = (j * kThreads + tid) * 4;
      const V q = reinterpret_cast<const V*>(g_in + base)[e / 4];
      s_tile[padded(e)] = q.x, s_tile[padded(e + 1)] = q.y, s_tile[padded(e + 2)] = q.z, s_tile[padded(e + 3)] = q.w;
    }
  } else {
    for (int e = tid; e < kTile; e += kThreads)
      s_tile[padded(e)] = e < valid ? static_cast<A>(g_in[base + e]) : A(0);  // identity past the end
  }
  __syncthreads();

  // 2. Blocked: thread t owns elements 16t .. 16t + 15; scan them serially in registers.
  A r_incl[kItems];
  A run = 0;
#pragma unroll
  for (int k = 0; k < kItems; ++k) r_incl[k] = (run += s_tile[padded(tid * kItems + k)]);

  // 3. Scan the 256 thread totals across the block.
  A tile_total;
  const A thread_offset = block_exclusive_scan(run, tile_total);

  // 4. Look back (warp 0) for the sum of every earlier tile.
  if (warp == 0) {
    A prefix = 0;
    if (tile == 0) {
      if (lane == 0)
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(g_status[0])
            .store(kFlagInclusive | bits_of(tile_total), cuda::memory_order_relaxed);
    } else {
      if (lane == 0)  // our own total, right away: successors can use it before we know our prefix
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(g_status[tile])
            .store(kFlagAggregate | bits_of(tile_total), cuda::memory_order_relaxed);
      std::int64_t top = tile - 1;  // the window is tiles top - 31 .. top, lane l looks at top - l
      while (true) {
        const std::int64_t j = top - lane;
        unsigned long long w = kFlagInclusive;  // before tile 0: "inclusive 0" (never summed, see below)
        do {
          if (j >= 0)
            w = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(g_status[j])
                    .load(cuda::memory_order_relaxed);
        } while (__any_sync(klab::kFullMask, (w >> 32) == 0));  // until all 32 have published something
        const unsigned incl = __ballot_sync(klab::kFullMask, (w >> 32) == 2);
        const int stop = incl ? __ffs(incl) - 1 : 31;  // nearest tile with a full prefix
        // Lanes 0..stop: aggregates of the tiles in between, then that tile's inclusive
        // prefix. Lanes past `stop` (including any j < 0) add nothing.
        prefix += klab::warp_sum(lane <= stop ? value_of<A>(w) : A(0));
        if (incl) break;
        top -= 32;
      }
      if (lane == 0)
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(g_status[tile])
            .store(kFlagInclusive | bits_of(prefix + tile_total), cuda::memory_order_relaxed);
    }
    if (lane == 0) s_prefix = prefix;
  }
  __syncthreads();  // also: every thread has read its items from s_tile before it is overwritten

  // 5. Results back to shared memory (blocked), then out striped (coalesced).
  const A offset = s_prefix + thread_offset;
#pragma unroll
  for (int k = 0; k < kItems; ++k) s_tile[padded(tid * kItems + k)] = r_incl[k] + offset;
  __syncthreads();
  if (valid == kTile && aligned) {
#pragma unroll
    for (int j = 0; j < kTile / (4 * kThreads); ++j) {
      const int e = (j * kThreads + tid) * 4;
      V q;
      q.x = s_tile[padded(e)], q.y = s_tile[padded(e + 1)], q.z = s_tile[padded(e + 2)], q.w = s_tile[padded(e + 3)];
      reinterpret_cast<V*>(g_out + base)[e / 4] = q;
    }
  } else {
    for (int e = tid; e < valid; e += kThreads) g_out[base + e] = s_tile[padded(e)];
  }
}

// v3_reg_tiles_backoff: v2's algorithm (ticket, aggregate, look-back, inclusive prefix)
// with three changes, each measured on its own (README; the sweeps in HISTORY.md):
//  - Bigger tiles, kept in registers. V = 8 float4s per thread: 8192 elements per tile of
//    256 threads (v2: 4096), half as many tiles and look-backs per byte. No shared-memory
//    tile: warp w owns 128 V consecutive elements; lane l loads the float4s at
//    (k * 32 + l) * 4, k < V (one load instruction = 512 contiguous bytes per warp), and
//    the scan runs on those registers: 3 adds inside each float4, a shuffle scan across the
//    lanes per k, a running carry over k. 64 registers a thread, 4 blocks per SM.
//  - Wait less: the look-back needs only the tiles in front of the nearest inclusive prefix
//    to have published (v2 waits for all 32 lanes' tiles).
//  - Poll less: after publishing its aggregate, warp 0 sleeps FirstSleepNs before its first
//    look (its predecessors need about that long anyway), then SleepNs between polls of a
//    window that is not ready (CUB's "delay constructor" does the same). Spinning warps
//    otherwise hammer the few L2 lines that hold the status words of the tiles in flight.
// Tried and dropped (same harness, HISTORY.md): persistent blocks that take the next tile's
// ticket and issue its loads before this tile's look-back (far slower than CUB: a tile
// reserved early publishes its aggregate late, and every successor waits on it); a look-back
// window of 128 or 256 tiles per poll (slower than 32: more polling traffic, never needed).

// Status words: one relaxed 64-bit access sees flag and value together (never torn).
__device__ __forceinline__ unsigned long long load_status(const unsigned long long* p) {
  return cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*const_cast<unsigned long long*>(p))
      .load(cuda::memory_order_relaxed);
}
__device__ __forceinline__ void store_status(unsigned long long* p, unsigned long long w) {
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*p).store(w, cuda::memory_order_relaxed);
}

// Warp 0 of v3: the sum of every tile before `tile`. Lane l reads the status of tile
// top - l. Compared with v2: it waits only for the tiles in front of the nearest inclusive
// prefix (not all 32), and it sleeps SleepNs between polls of a window that is not ready.
template <class A, int SleepNs>
__device__ A lookback(const unsigned long long* g_status, std::int64_t tile) {
  const int lane = threadIdx.x & 31;
  A prefix = 0;
  for (std::int64_t top = tile - 1;; top -= 32) {
    const std::int64_t j = top - lane;
    unsigned long long w;
    unsigned incl;
    while (true) {
      w = j >= 0 ? load_status(g_status + j) : kFlagInclusive;  // before tile 0: "inclusive 0"
      const unsigned flag = static_cast<unsigned>(w >> 32);
      incl = __ballot_sync(klab::kFullMask, flag == 2);
      const unsigned unpublished = __ballot_sync(klab::kFullMask, flag == 0);
      const unsigned in_front = incl ? (incl & (0u - incl)) - 1 : 0xffffffffu;  // lanes before the nearest inclusive
      if ((unpublished & in_front) == 0) break;
      if constexpr (SleepNs > 0) __nanosleep(SleepNs);
    }
    const int stop = incl ? __ffs(incl) - 1 : 31;
    prefix += klab::warp_sum(lane <= stop ? value_of<A>(w) : A(0));
    if (incl) return prefix;
  }
}

template <int V> struct V3Tile { static constexpr int kElems = kThreads * 4 * V, kWarpElems = 128 * V; };

// Loads tile t into r_tile (zeros past n); full tiles with aligned pointers use 16-byte loads.
template <class In, class A, int V>
__device__ __forceinline__ void v3_load(vec4_t<A> (&r_tile)[V], const In* __restrict__ g_in, std::int64_t t,
                                        std::int64_t n, bool aligned) {
  using Vt = vec4_t<A>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t wbase = t * V3Tile<V>::kElems + warp * V3Tile<V>::kWarpElems;  // this warp's first element
  if (aligned && (t + 1) * V3Tile<V>::kElems <= n) {
    const Vt* g_v = reinterpret_cast<const Vt*>(g_in + wbase);
#pragma unroll
    for (int k = 0; k < V; ++k) r_tile[k] = __ldcs(g_v + k * 32 + lane);  // read once: evict-first
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const std::int64_t i = wbase + (k * 32 + lane) * 4;
      A r_e[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) r_e[c] = i + c < n ? static_cast<A>(g_in[i + c]) : A(0);  // identity past the end
      r_tile[k].x = r_e[0], r_tile[k].y = r_e[1], r_tile[k].z = r_e[2], r_tile[k].w = r_e[3];
    }
  }
}

template <class In, class A, int V, int SleepNs, int FirstSleepNs>
__global__ void __launch_bounds__(kThreads)
    scan_v3_reg_tiles_backoff(const In* __restrict__ g_in, A* __restrict__ g_out, std::int64_t n,
                              unsigned long long* g_status, unsigned int* g_ticket, bool aligned) {
  static_assert(V >= 1 && V <= 8, "v3: V float4s per thread live in registers (64 a thread at V = 8)");
  using Vt = vec4_t<A>;
  constexpr int kWarps = kThreads / 32;
  __shared__ A s_warp[kWarps];  // each warp's total, for the tile's block-level scan
  __shared__ unsigned int s_id;
  __shared__ A s_prefix;        // the sum of all tiles before this one (from warp 0)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  if (tid == 0) s_id = atomicAdd(g_ticket, 1u);  // tile ids in the order blocks start (as v2)
  __syncthreads();
  const std::int64_t t = s_id;
  Vt r_cur[V];                                   // (V float4) per thread
  v3_load<In, A, V>(r_cur, g_in, t, n, aligned);

  // 1. Scan the warp's 128 V elements in registers: inside each float4, across the lanes
  //    (shuffles), and a carry from float4 k to k + 1.
  A carry = 0;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    r_cur[k].y += r_cur[k].x, r_cur[k].z += r_cur[k].y, r_cur[k].w += r_cur[k].z;  // inclusive inside the float4
    const A incl = warp_inclusive_scan(r_cur[k].w);
    A excl = __shfl_up_sync(klab::kFullMask, incl, 1);  // exclusive without a subtraction (exact for fp32)
    if (lane == 0) excl = 0;
    const A before = carry + excl;
    r_cur[k].x += before, r_cur[k].y += before, r_cur[k].z += before, r_cur[k].w += before;
    carry += __shfl_sync(klab::kFullMask, incl, 31);  // the warp's total of float4 k
  }
  if (lane == 0) s_warp[warp] = carry;
  __syncthreads();

  // 2. The warps before this one, and the tile's total (a fixed order).
  A warp_prefix = 0, tile_total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const A v = s_warp[w];
    if (w < warp) warp_prefix += v;
    tile_total += v;
  }

  // 3. Warp 0: publish the aggregate, look back, publish the inclusive prefix.
  if (warp == 0) {
    A prefix = 0;
    if (t == 0) {
      if (lane == 0) store_status(g_status, kFlagInclusive | bits_of(tile_total));
    } else {
      if (lane == 0) store_status(g_status + t, kFlagAggregate | bits_of(tile_total));
      if constexpr (FirstSleepNs > 0) __nanosleep(FirstSleepNs);  // the predecessors need about this long
      prefix = lookback<A, SleepNs>(g_status, t);
      if (lane == 0) store_status(g_status + t, kFlagInclusive | bits_of(prefix + tile_total));
    }
    if (lane == 0) s_prefix = prefix;
  }
  __syncthreads();

  // 4. Results out, in the layout they were loaded in.
  const A offset = s_prefix + warp_prefix;
  const std::int64_t wbase = t * V3Tile<V>::kElems + warp * V3Tile<V>::kWarpElems;
  if (aligned && (t + 1) * V3Tile<V>::kElems <= n) {
    Vt* g_v = reinterpret_cast<Vt*>(g_out + wbase);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      Vt q = r_cur[k];
      q.x += offset, q.y += offset, q.z += offset, q.w += offset;
      g_v[k * 32 + lane] = q;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const std::int64_t i = wbase + (k * 32 + lane) * 4;
      const A r_e[4] = {r_cur[k].x, r_cur[k].y, r_cur[k].z, r_cur[k].w};
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (i + c < n) g_out[i + c] = r_e[c] + offset;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

template <class F>
void dispatch_scan(DType t, F&& f) {
  if (t == DType::f32) f.template operator()<float, float>();
  else f.template operator()<int, unsigned int>();
}

// v1: the block totals of each level (the level with one block needs none).
std::vector<std::int64_t> v1_levels(std::int64_t n) {
  std::vector<std::int64_t> lv;
  for (std::int64_t b = klab::ceil_div<std::int64_t>(n, kV1Tile); b > 1; b = klab::ceil_div<std::int64_t>(b, kV1Tile))
    lv.push_back(b);
  return lv;
}

std::size_t v1_workspace(const Problem& p) {
  std::size_t bytes = 0;
  for (auto b : v1_levels(p.shape[0])) bytes += static_cast<std::size_t>(b) * 4;
  return bytes;
}

template <class In, class A>
void launch_v1_level(const In* in, A* out, std::int64_t n, A* ws, cudaStream_t s) {
  const std::int64_t blocks = klab::ceil_div<std::int64_t>(n, kV1Tile);
  if (blocks == 1) {
    scan_v1_scan_then_propagate_block<In, A><<<1, kThreads, 0, s>>>(in, out, nullptr, n);
    KLAB_CHECK_LAUNCH();
    return;
  }
  A* sums = ws;
  scan_v1_scan_then_propagate_block<In, A><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(in, out, sums, n);
  KLAB_CHECK_LAUNCH();
  launch_v1_level<A, A>(sums, sums, blocks, ws + blocks, s);  // in place: each thread reads, then writes, its own
  scan_v1_scan_then_propagate_add<A><<<static_cast<unsigned>(blocks - 1), kThreads, 0, s>>>(out, sums, n);
  KLAB_CHECK_LAUNCH();
}

void run_v1_scan_then_propagate(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  dispatch_scan(l.problem.dtype, [&]<class In, class A>() {
    launch_v1_level<In, A>(l.in[0].as<In>(), reinterpret_cast<A*>(l.out[0].data), n, static_cast<A*>(l.workspace),
                         l.stream);
  });
}

// v2 workspace: [ticket (8 bytes)][status word per tile], zeroed before every launch.
std::size_t v2_workspace(const Problem& p) {
  return 8 * (1 + static_cast<std::size_t>(klab::ceil_div<std::int64_t>(p.shape[0], kTile)));
}

void run_v2_decoupled_lookback(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  const std::int64_t tiles = klab::ceil_div<std::int64_t>(n, kTile);
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.workspace, 0, v2_workspace(l.problem), l.stream));
  auto* ticket = static_cast<unsigned int*>(l.workspace);
  auto* status = static_cast<unsigned long long*>(l.workspace) + 1;
  const bool aligned = reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(l.out[0].data) % 16 == 0;
  dispatch_scan(l.problem.dtype, [&]<class In, class A>() {
    scan_v2_decoupled_lookback<In, A><<<static_cast<unsigned>(tiles), kThreads, 0, l.stream>>>(
        l.in[0].as<In>(), reinterpret_cast<A*>(l.out[0].data), n, status, ticket, aligned);
    KLAB_CHECK_LAUNCH();
  });
}

// v3's settings: V = 8 float4s per thread, 500 ns between polls, 3000 ns before the first
// (the best of V = 4, 6, 8, sleeps of 0-1000 ns between polls and 0-6000 ns before the
// first, at 2^24 and 2^28; the sweep in HISTORY.md).
constexpr int kV3Vecs = 8, kV3SleepNs = 500, kV3FirstSleepNs = 3000;
using V3 = V3Tile<kV3Vecs>;

// v3: [ticket (8 bytes)][status word per tile], zeroed before every launch (as v2).
std::size_t v3_workspace(const Problem& p) {
  return 8 * (1 + static_cast<std::size_t>(klab::ceil_div<std::int64_t>(p.shape[0], V3::kElems)));
}

void run_v3_reg_tiles_backoff(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  const std::int64_t tiles = klab::ceil_div<std::int64_t>(n, V3::kElems);
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.workspace, 0, v3_workspace(l.problem), l.stream));
  auto* ticket = static_cast<unsigned int*>(l.workspace);
  auto* status = static_cast<unsigned long long*>(l.workspace) + 1;
  const bool aligned = reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(l.out[0].data) % 16 == 0;
  dispatch_scan(l.problem.dtype, [&]<class In, class A>() {
    scan_v3_reg_tiles_backoff<In, A, kV3Vecs, kV3SleepNs, kV3FirstSleepNs>
        <<<static_cast<unsigned>(tiles), kThreads, 0, l.stream>>>(
        l.in[0].as<In>(), reinterpret_cast<A*>(l.out[0].data), n, status, ticket, aligned);
    KLAB_CHECK_LAUNCH();
  });
}

std::size_t cub_scan_bytes(const Problem& p) {
  std::size_t bytes = 0;
  dispatch_scan(p.dtype, [&]<class In, class A>() {
    KLAB_CHECK_CUDA(cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const A*>(nullptr),
                                                  static_cast<A*>(nullptr), p.shape[0]));
  });
  return bytes;
}

void run_cub(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  dispatch_scan(l.problem.dtype, [&]<class In, class A>() {
    std::size_t bytes = l.workspace_bytes;
    KLAB_CHECK_CUDA(cub::DeviceScan::InclusiveSum(l.workspace, bytes, reinterpret_cast<const A*>(l.in[0].data),
                                                  reinterpret_cast<A*>(l.out[0].data), n, l.stream));
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_op(make_scan_op()));
KLAB_REGISTER(klab::register_impl({.op = "scan", .name = "v1_scan_then_propagate",
                                   .summary = "block scans + recursive scan of block totals + add: 2x the minimum traffic",
                                   .kind = klab::ImplKind::cuda, .workspace = v1_workspace, .run = run_v1_scan_then_propagate}));
KLAB_REGISTER(klab::register_impl({.op = "scan", .name = "v2_decoupled_lookback",
                                   .summary = "one pass: tile ids from a counter, published totals, warp look-back",
                                   .kind = klab::ImplKind::cuda, .workspace = v2_workspace, .run = run_v2_decoupled_lookback}));
KLAB_REGISTER(klab::register_impl({.op = "scan", .name = "v3_reg_tiles_backoff",
                                   .summary = "one pass: 8192-element register tiles, look-back with sleeps between polls",
                                   .kind = klab::ImplKind::cuda, .workspace = v3_workspace,
                                   .run = run_v3_reg_tiles_backoff}));
KLAB_REGISTER(klab::register_impl({.op = "scan", .name = "cub",
                                   .summary = "cub::DeviceScan::InclusiveSum",
                                   .kind = klab::ImplKind::vendor, .workspace = cub_scan_bytes,
                                   .run = run_cub}));
