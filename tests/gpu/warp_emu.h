// warp_emu.h - the CUDA built-ins that gpu/p2g.cuh uses, on the host (C++20), so that the warp
// logic of the CUDA backend's P2G runs and is tested where there is no GPU.
//
// One warp at a time: emu_run_warp(f) runs f(lane) on 32 threads, and every warp-wide built-in
// (__shfl_*_sync, __ballot_sync, __all_sync, __reduce_*_sync, __syncwarp) is a rendezvous of the
// 32 threads: each lane puts its value in a slot, all wait, each reads what it asked for, all
// wait again. That is the semantics of converged warp code (every lane reaches every built-in in
// the same order), which is the only kind p2g.cuh writes (its comments say where the control
// flow is uniform over the warp); a lane that skipped a built-in would leave the others waiting,
// so a divergent built-in stops the test after EMU_STUCK_SECONDS with a message naming the
// rendezvous, not a silent pass.
// Atomics are std::atomic_ref operations; __shared__ memory is ordinary memory that the test
// passes in, ordered by the rendezvous as __syncwarp orders it on the GPU.
#ifndef DRIFT_TESTS_GPU_WARP_EMU_H
#define DRIFT_TESTS_GPU_WARP_EMU_H

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>

#ifndef EMU_STUCK_SECONDS
#define EMU_STUCK_SECONDS 60
#endif

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline

struct float4 {
  float x, y, z, w;
};
struct float3 {
  float x, y, z;
};
struct int2 {
  int x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }

struct emu_dim {
  unsigned x, y, z;
};
inline thread_local emu_dim threadIdx = {0, 0, 0};

/* The 32 lanes meeting: the last to arrive wakes the others. One that waits EMU_STUCK_SECONDS
 * reports a divergent built-in and aborts. */
struct emu_meeting {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  long long generation = 0;
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m);
    const long long g = generation;
    if (++arrived == 32) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    if (!cv.wait_for(lock, std::chrono::seconds(EMU_STUCK_SECONDS), [&] { return generation != g; })) {
      std::fprintf(stderr, "warp_emu: %d of 32 lanes at rendezvous %lld after %d s: a warp built-in that not every "
                   "lane reached (divergent control flow)\n", arrived, g, EMU_STUCK_SECONDS);
      std::abort();
    }
  }
};

struct emu_warp {
  emu_meeting meet;
  uint64_t slot[32];
  long long rendezvous = 0; /* built-ins met (counted by lane 0) */
};
inline emu_warp *emu_current = nullptr;

static inline int emu_lane() { return (int)(threadIdx.x & 31u); }

/* Every lane's v, exchanged: out[l] = lane l's value. */
template <class T> static inline void emu_gather(T v, T out[32]) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>, "a value of at most 8 bytes");
  emu_warp &w = *emu_current;
  std::memcpy(&w.slot[emu_lane()], &v, sizeof(T));
  w.meet.arrive_and_wait();
  for (int l = 0; l < 32; ++l) std::memcpy(&out[l], &w.slot[l], sizeof(T));
  if (emu_lane() == 0) ++w.rendezvous;
  w.meet.arrive_and_wait();
}

template <class T> static inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  T all[32];
  emu_gather(v, all);
  const int lane = emu_lane();
  return all[(lane & ~(width - 1)) + (src & (width - 1))];
}
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned d) {
  T all[32];
  emu_gather(v, all);
  const int lane = emu_lane();
  return lane >= (int)d ? all[lane - (int)d] : v;
}
static inline unsigned __ballot_sync(unsigned, int pred) {
  int all[32];
  emu_gather(pred ? 1 : 0, all);
  unsigned b = 0;
  for (int l = 0; l < 32; ++l) b |= (unsigned)(all[l] != 0) << l;
  return b;
}
static inline int __all_sync(unsigned m, int pred) { return __ballot_sync(m, pred) == 0xffffffffu; }
/* Every lane's v combined by op, in lane order. */
template <class T, class Op> static inline T emu_reduce(T v, Op op) {
  T all[32];
  emu_gather(v, all);
  T r = all[0];
  for (int l = 1; l < 32; ++l) r = op(r, all[l]);
  return r;
}
static inline unsigned __reduce_or_sync(unsigned, unsigned v) {
  return emu_reduce(v, [](unsigned a, unsigned b) { return a | b; });
}
static inline unsigned __reduce_and_sync(unsigned, unsigned v) {
  return emu_reduce(v, [](unsigned a, unsigned b) { return a & b; });
}
template <class T> static inline T __reduce_min_sync(unsigned, T v) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned>, "CUDA's __reduce_min_sync takes int or unsigned");
  return emu_reduce(v, [](T a, T b) { return a < b ? a : b; });
}
template <class T> static inline T __reduce_max_sync(unsigned, T v) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned>, "CUDA's __reduce_max_sync takes int or unsigned");
  return emu_reduce(v, [](T a, T b) { return a > b ? a : b; });
}
static inline void __syncwarp(unsigned = 0xffffffffu) {
  int all[32];
  emu_gather(0, all);
}

static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
static inline unsigned __float_as_uint(float f) {
  unsigned i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
static inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

static inline float atomicAdd(float *a, float v) { return std::atomic_ref<float>(*a).fetch_add(v); }
static inline float4 atomicAdd(float4 *a, float4 v) {
  return float4{atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y), atomicAdd(&a->z, v.z), atomicAdd(&a->w, v.w)};
}
static inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*a).fetch_add(v);
}
static inline unsigned long long atomicMin(unsigned long long *a, unsigned long long v) {
  std::atomic_ref<unsigned long long> r(*a);
  unsigned long long old = r.load();
  while (v < old && !r.compare_exchange_weak(old, v)) {
  }
  return old;
}
static inline unsigned atomicOr(unsigned *a, unsigned v) { return std::atomic_ref<unsigned>(*a).fetch_or(v); }

/* Runs f(lane) for the 32 lanes of one warp (threadIdx.x = lane); returns the built-ins met. */
template <class F> static long long emu_run_warp(F f) {
  emu_warp w;
  emu_current = &w;
  std::thread t[32];
  for (int l = 0; l < 32; ++l)
    t[l] = std::thread([&f, l] {
      threadIdx = emu_dim{(unsigned)l, 0, 0};
      f(l);
    });
  for (auto &x : t) x.join();
  emu_current = nullptr;
  return w.rendezvous;
}

#endif
