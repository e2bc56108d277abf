// What the native kernels share: the thread pool loop, four-lane float arithmetic that rounds as
// XLA does, and the shape checks of operands.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"

// 1 where XLA's CPU backend fuses a * b + c * d into one multiply-add (the Python side asks
// XLA, `gigastep.game._native.xla_fuses_multiply_add`, and defines it so), else 0.
#ifndef GIGASTEP_XLA_FMA
#define GIGASTEP_XLA_FMA 0
#endif

namespace gigastep_native {

namespace ffi = xla::ffi;

// Runs body(begin, end) over [0, total) in chunks on the caller and XLA's intra-op pool.
// Chunks are claimed from a shared counter, so the caller only ever waits for chunks that a
// running worker has claimed: no deadlock even when the pool is busy. Workers that start
// late find nothing left; the shared state outlives the call for them.
template <typename Body>
void ParallelFor(ffi::ThreadPool& pool, int64_t total, int64_t grain, const Body& body) {
  const int64_t threads = pool.num_threads();
  const int64_t chunks = std::min<int64_t>((total + grain - 1) / grain, 4 * (threads + 1));
  if (threads <= 0 || chunks <= 1) {
    body(0, total);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  auto state = std::make_shared<State>();
  const int64_t per = (total + chunks - 1) / chunks;
  // The body is only used while a chunk is unfinished, i.e. while the caller waits.
  auto run = [state, chunks, per, total, &body]() {
    for (int64_t c; (c = state->next.fetch_add(1)) < chunks;) {
      body(c * per, std::min(total, (c + 1) * per));
      if (state->done.fetch_add(1) + 1 == chunks) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->cv.notify_all();
      }
    }
  };
  for (int64_t w = 0; w < std::min(threads, chunks - 1); ++w) {
    auto task = run;
    pool.Schedule(std::move(task));
  }
  run();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done.load() == chunks; });
}

// a * b + c as XLA computes `a * b + (product)`: fused (one rounding) where XLA fuses.
inline float Madd(float a, float b, float c) {
#if GIGASTEP_XLA_FMA
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

inline F4 Splat(float a) { return F4{a, a, a, a}; }
inline I4 SplatI(int32_t a) { return I4{a, a, a, a}; }
inline F4 Load(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline I4 LoadI(const int32_t* p) {
  I4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Madd per lane (four lanes), and the correctly rounded square root per lane.
inline F4 Madd4(F4 a, F4 b, F4 c) {
#if GIGASTEP_XLA_FMA && defined(__FMA__)
  return (F4)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
#else
  F4 r;
  for (int k = 0; k < 4; ++k) r[k] = Madd(a[k], b[k], c[k]);
  return r;
#endif
}
inline F4 Sqrt4(F4 a) {
#if defined(__SSE__)
  return (F4)_mm_sqrt_ps((__m128)a);
#else
  F4 r;
  for (int k = 0; k < 4; ++k) r[k] = std::sqrt(a[k]);
  return r;
#endif
}

// "(2, 3)" for dims {2, 3}, "()" for a scalar.
template <typename Dims>
std::string ShapeText(const Dims& dims) {
  std::string s = "(";
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k) s += ", ";
    s += std::to_string(dims[k]);
  }
  return s + (dims.size() == 1 ? ",)" : ")");
}

// Success iff `dims` is `lead` followed by `tail`; else an error of `target` naming the
// operand and both shapes.
template <typename Dims>
ffi::Error CheckShape(const char* target, const char* name, const Dims& dims,
                      const std::vector<int64_t>& lead, std::initializer_list<int64_t> tail) {
  std::vector<int64_t> want(lead);
  want.insert(want.end(), tail);
  bool same = dims.size() == want.size();
  for (size_t k = 0; same && k < want.size(); ++k) same = dims[k] == want[k];
  if (same) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string(target) + ": operand " + name + " has shape " +
                                     ShapeText(dims) + ", expected " + ShapeText(want) +
                                     " (batch dims and n from x)");
}

}  // namespace gigastep_native
