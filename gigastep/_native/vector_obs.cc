// Visibility + vector observation of a batch of games in one pass (XLA FFI, CPU).
//
// The same computation as gigastep/observations/visibility.py followed by
// gigastep/observations/vector.py, written per game so that nothing is recomputed per
// element: XLA's CPU backend re-evaluates fused producers (bit sets, the counting sort)
// for every element of a gathered consumer. Every floating-point operation below is the one
// XLA's CPU backend performs for the JAX code, in the same order, so the two paths agree bit
// for bit; tests/test_native_vector_obs.py holds them to that. XLA rewrites a division by a
// constant into a multiplication by its float32 reciprocal and fuses one multiply-subtract
// (in wrap_angle); the code below does the same, explicitly.
//
// Compile with -ffp-contract=off: the compiler must not fuse anything else.
//
// Inputs (leading batch dims "..." are the same for every operand, vmap_method="broadcast_all"):
//   x, y, z, heading, v, health: (..., n) f32     alive: (..., n) pred
//   dist: (..., n, n) f32        detected: (..., n, n) pred [i, j]: j detects i
//   comm_noise: (..., n, n) f32  boxes: (..., NB >= n_boxes, 4) f32 (world coordinates)
//   waypoint: (..., 4) f32       waypoint_time: (...) f32
// Output: (..., n, L) f32, L = 9 m + 5 [waypoints] + 4 n_boxes.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kMaxAgents = 64;       // bit sets are one 64-bit word per agent
constexpr int kCountingSortMax = 16; // up to this n: branch-free rank counting

struct Params {
  int n, m, n_boxes, box_stride, L;
  bool stochastic_comm, waypoints;
  // inv_*: the observation's float32 scale factors (1 / limit computed in double, then
  // rounded); recip_*: XLA's rewrite of a division by a float32 constant c, 1.0f / c.
  float comm_range, inv_comm_range, inv_lx, inv_ly, inv_z, inv_diag, recip_lx, recip_ly;
  const int64_t* teams;
  const float* sprites;
};

struct Game {
  const float *x, *y, *z, *h, *v, *health, *dist, *comm, *boxes, *waypoint;
  const bool *alive, *detected;
  float waypoint_time;
  float* out;
};

// floor without a libm call (baseline x86-64 has no rounding instruction): exact for every
// float, as floats of magnitude >= 2^23 (and NaN, inf) are returned unchanged.
inline float Floor(float a) {
  if (!(std::fabs(a) < 8388608.0f)) return a;
  const float t = static_cast<float>(static_cast<int32_t>(a));  // truncation toward zero
  return t > a ? t - 1.0f : t;
}

// wrap_angle of gigastep/dynamics.py, a - 2 pi floor((a + pi) / (2 pi)), evaluated the way
// XLA's CPU backend evaluates it: the division by the constant 2 pi becomes a multiplication
// by its float32 reciprocal, and a - 2 pi k is fused into one multiply-add (one rounding).
// The fused form is computed exactly in double: 2 pi k needs at most 24 + 29 bits for
// |k| < 2^29 and the difference fits in 53 bits, so one rounding to float gives fmaf's
// result without a libm call.
inline float WrapAngle(float a) {
  const float two_pi = static_cast<float>(2.0 * M_PI), pi = static_cast<float>(M_PI);
  const float inv_two_pi = 1.0f / two_pi;
  const float k = Floor((a + pi) * inv_two_pi);
  return static_cast<float>(static_cast<double>(a) -
                            static_cast<double>(two_pi) * static_cast<double>(k));
}

// seen[e] as a bit set over i (visibility.py).
void Visibility(const Params& p, const Game& g, uint64_t* seen) {
  const int n = p.n;
  uint64_t det[kMaxAgents];  // det[i]: bit j set iff j detects i
  for (int i = 0; i < n; ++i) {
    uint64_t b = 0;
    for (int j = 0; j < n; ++j) b |= static_cast<uint64_t>(g.detected[i * n + j]) << j;
    det[i] = b;
  }
  if (p.stochastic_comm) {
    // ratio <= noise for every pair first, in one loop the compiler vectorises.
    bool close[kMaxAgents * kMaxAgents];
    const int nn = n * n;
    if (p.comm_range > 0) {
      for (int k = 0; k < nn; ++k) {
        float ratio = g.dist[k] * p.inv_comm_range;
        ratio = std::min(std::max(ratio, 0.0f), 1.0f);
        close[k] = ratio <= g.comm[k];
      }
    } else {
      for (int k = 0; k < nn; ++k) close[k] = (g.dist[k] > 0 ? 1.0f : 0.0f) <= g.comm[k];
    }
    uint64_t alive = 0;
    for (int j = 0; j < n; ++j) alive |= static_cast<uint64_t>(g.alive[j]) << j;
    for (int e = 0; e < n; ++e) {
      uint64_t share = 0;  // teammates j that share with e
      for (int j = 0; j < n; ++j) {
        share |= static_cast<uint64_t>(close[e * n + j] && p.teams[e] == p.teams[j]) << j;
      }
      share &= alive;
      uint64_t row = share;  // i itself shares, or a sharing teammate detects i
      for (int i = 0; i < n; ++i) row |= static_cast<uint64_t>((share & det[i]) != 0) << i;
      seen[e] = g.alive[e] ? row : 0;
    }
  } else {
    uint64_t team1 = 0, alive = 0;
    for (int j = 0; j < n; ++j) {
      team1 |= static_cast<uint64_t>(p.teams[j] == 1) << j;
      alive |= static_cast<uint64_t>(g.alive[j]) << j;
    }
    uint64_t by_team1 = 0, by_team0 = 0;  // bit i: agent i detected by a member of that team
    for (int i = 0; i < n; ++i) {
      by_team1 |= static_cast<uint64_t>((det[i] & team1) != 0) << i;
      by_team0 |= static_cast<uint64_t>((det[i] & ~team1) != 0) << i;
    }
    for (int e = 0; e < n; ++e) {
      const bool in1 = p.teams[e] == 1;
      const uint64_t mates = in1 ? team1 : ~team1;
      seen[e] = g.alive[e] ? ((in1 ? by_team1 : by_team0) | (mates & alive)) : 0;
    }
  }
}

// idx[0..m): agents of ego e's rows. Key: ego -1, seen agents their distance, unseen +inf;
// increasing key, ties by index (vector.py's stable partial sort).
void RowOrder(const Params& p, const Game& g, int e, uint64_t seen_e, int* idx) {
  const int n = p.n, m = p.m;
  float key[kMaxAgents];
  for (int i = 0; i < n; ++i) {
    key[i] = ((seen_e >> i) & 1) ? g.dist[e * n + i] : INFINITY;
  }
  key[e] = -1.0f;
  for (int r = 0; r < m; ++r) idx[r] = r;  // valid indices even for NaN keys (no crash)
  if (n <= kCountingSortMax) {
    // Counting sort: position of i = number of j ordered before it. One 16-lane vector of
    // keys (padding +inf, never before anything), compared with each key in turn.
    typedef float F4 __attribute__((vector_size(16)));
    typedef int32_t I4 __attribute__((vector_size(16)));
    F4 keys[4];
    I4 lane[4];
    for (int j = 0; j < 16; ++j) {
      keys[j / 4][j % 4] = j < n ? key[j] : INFINITY;
      lane[j / 4][j % 4] = j;
    }
    for (int i = 0; i < n; ++i) {
      I4 count = {0, 0, 0, 0};
      for (int w = 0; w < (n + 3) / 4; ++w) {
        count += (keys[w] < key[i]) | ((keys[w] == key[i]) & (lane[w] < i));  // -1 or 0
      }
      const int pos = -(count[0] + count[1] + count[2] + count[3]);
      if (pos < m) idx[pos] = i;
    }
    return;
  }
  // Insertion into the m smallest so far; visiting i in index order and inserting after
  // equal keys keeps ties by index.
  float best[kMaxAgents];
  int size = 0;
  for (int i = 0; i < n; ++i) {
    const float k = key[i];
    if (size == m && !(k < best[m - 1])) continue;
    int pos = size < m ? size++ : m - 1;
    while (pos > 0 && k < best[pos - 1]) {
      best[pos] = best[pos - 1];
      idx[pos] = idx[pos - 1];
      --pos;
    }
    best[pos] = k;
    idx[pos] = i;
  }
}

void ObserveGame(const Params& p, const Game& g) {
  const int n = p.n, m = p.m, L = p.L;
  uint64_t seen[kMaxAgents];
  Visibility(p, g, seen);
  float boxes[4 * 64];
  const int nb = p.n_boxes;
  for (int b = 0; b < nb; ++b) {
    const float* src = g.boxes + 4 * b;
    boxes[4 * b] = src[0] * p.recip_lx;
    boxes[4 * b + 1] = src[1] * p.recip_ly;
    boxes[4 * b + 2] = src[2] * p.recip_lx;
    boxes[4 * b + 3] = src[3] * p.recip_ly;
  }
  const float active = g.waypoint_time > 0 ? 1.0f : 0.0f;
  int idx[kMaxAgents];
  for (int e = 0; e < n; ++e) {
    const float alive = g.alive[e] ? 1.0f : 0.0f;
    RowOrder(p, g, e, seen[e], idx);
    int count = 0;
    for (uint64_t bits = seen[e]; bits; bits &= bits - 1) ++count;
    float* o = g.out + static_cast<int64_t>(e) * L;
    // Row r: agent i = idx[r]. Each value is XLA's d * scale * s * alive, where
    // d = row - k * own with k = 1 for the team column and for another agent's relative
    // features (x, y, z, heading, speed) and k = 0 otherwise; the team column becomes
    // 1 - |d| and another agent's heading difference is wrapped. Scale 1 is left out (exact).
    const float xe = g.x[e], ye = g.y[e], ze = g.z[e], he = g.h[e], ve = g.v[e];
    const float te = static_cast<float>(p.teams[e]);
    for (int r = 0; r < m; ++r) {
      const int i = idx[r];
      const float sa = r < count ? alive : 0.0f;  // s * alive, both 0/1: exact
      float* q = o + 9 * r;
      q[0] = sa;
      q[1] = (1.0f - std::fabs(static_cast<float>(p.teams[i]) - te)) * sa;
      if (i == e) {
        q[2] = (xe - 0.0f * xe) * p.inv_lx * sa;
        q[3] = (ye - 0.0f * ye) * p.inv_ly * sa;
        q[4] = (ze - 0.0f * ze) * p.inv_z * sa;
        q[5] = (he - 0.0f * he) * sa;
        q[6] = (ve - 0.0f * ve) * p.inv_diag * sa;
        q[7] = (g.health[e] - 0.0f * g.health[e]) * sa;
      } else {
        q[2] = (g.x[i] - xe) * p.inv_lx * sa;
        q[3] = (g.y[i] - ye) * p.inv_ly * sa;
        q[4] = (g.z[i] - ze) * p.inv_z * sa;
        q[5] = WrapAngle(g.h[i] - he) * sa;
        q[6] = (g.v[i] - ve) * p.inv_diag * sa;
        q[7] = (g.health[i] - 0.0f * g.health[e]) * sa;
      }
      q[8] = (p.sprites[i] - 0.0f * p.sprites[e]) * sa;
    }
    float* t = o + 9 * m;
    if (p.waypoints) {
      t[0] = (g.waypoint[0] - g.x[e]) * p.recip_lx * active * alive;
      t[1] = (g.waypoint[1] - g.y[e]) * p.recip_ly * active * alive;
      t[2] = (g.waypoint[2] - g.x[e]) * p.recip_lx * active * alive;
      t[3] = (g.waypoint[3] - g.y[e]) * p.recip_ly * active * alive;
      t[4] = active * alive;
      t += 5;
    }
    for (int b = 0; b < 4 * nb; ++b) t[b] = boxes[b] * alive;
  }
}

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

ffi::Error VectorObsImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> y,
                         ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::F32> heading,
                         ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> health,
                         ffi::Buffer<ffi::PRED> alive, ffi::Buffer<ffi::F32> dist,
                         ffi::Buffer<ffi::PRED> detected, ffi::Buffer<ffi::F32> comm,
                         ffi::Buffer<ffi::F32> boxes, ffi::Buffer<ffi::F32> waypoint,
                         ffi::Buffer<ffi::F32> waypoint_time, ffi::ResultBuffer<ffi::F32> out,
                         int64_t m, int64_t n_boxes, bool stochastic_comm, bool waypoints,
                         float comm_range, float inv_lx, float inv_ly, float inv_z,
                         float inv_diag, float lx, float ly, ffi::Span<const int64_t> teams,
                         ffi::Span<const float> sprites) {
  const auto dims = x.dimensions();
  if (dims.size() < 1) return ffi::Error::InvalidArgument("x must have an agent axis");
  const int n = static_cast<int>(dims.back());
  if (n < 1 || n > kMaxAgents || static_cast<int64_t>(teams.size()) != n ||
      static_cast<int64_t>(sprites.size()) != n || m < 1 || m > n) {
    return ffi::Error::InvalidArgument("gigastep_vector_obs: inconsistent agent counts");
  }
  const auto box_dims = boxes.dimensions();
  if (box_dims.size() < 2 || box_dims.back() != 4 || n_boxes < 0 || n_boxes > 64 ||
      box_dims[box_dims.size() - 2] < n_boxes) {
    return ffi::Error::InvalidArgument("gigastep_vector_obs: boxes must be (..., >= n_boxes, 4)");
  }
  const int64_t games = x.element_count() / n;
  Params p;
  p.n = n;
  p.m = static_cast<int>(m);
  p.n_boxes = static_cast<int>(n_boxes);
  p.box_stride = static_cast<int>(box_dims[box_dims.size() - 2]) * 4;
  p.L = 9 * p.m + (waypoints ? 5 : 0) + 4 * p.n_boxes;
  if (out->element_count() != games * n * p.L || dist.element_count() != games * n * n) {
    return ffi::Error::InvalidArgument("gigastep_vector_obs: operand shapes disagree");
  }
  p.stochastic_comm = stochastic_comm;
  p.waypoints = waypoints;
  p.comm_range = comm_range;
  p.inv_lx = inv_lx;
  p.inv_ly = inv_ly;
  p.inv_z = inv_z;
  p.inv_diag = inv_diag;
  p.inv_comm_range = comm_range > 0 ? 1.0f / comm_range : 0.0f;
  p.recip_lx = 1.0f / lx;
  p.recip_ly = 1.0f / ly;
  p.teams = teams.begin();
  p.sprites = sprites.begin();
  float* out_data = out->typed_data();
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      Game g;
      const int64_t a = b * n, aa = b * n * n;
      g.x = x.typed_data() + a;
      g.y = y.typed_data() + a;
      g.z = z.typed_data() + a;
      g.h = heading.typed_data() + a;
      g.v = v.typed_data() + a;
      g.health = health.typed_data() + a;
      g.alive = alive.typed_data() + a;
      g.dist = dist.typed_data() + aa;
      g.detected = detected.typed_data() + aa;
      g.comm = comm.typed_data() + aa;
      g.boxes = boxes.typed_data() + b * p.box_stride;
      g.waypoint = waypoint.typed_data() + 4 * b;
      g.waypoint_time = waypoint_time.typed_data()[b];
      g.out = out_data + b * n * p.L;
      ObserveGame(p, g);
    }
  };
  // ~1 us per game of 5 vs 5: chunks of >= 64 games keep the scheduling cost negligible.
  ParallelFor(pool, games, std::max<int64_t>(1, 64 * 10 / n), body);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GigastepVectorObs, VectorObsImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // y
                                  .Arg<ffi::Buffer<ffi::F32>>()  // z
                                  .Arg<ffi::Buffer<ffi::F32>>()  // heading
                                  .Arg<ffi::Buffer<ffi::F32>>()  // v
                                  .Arg<ffi::Buffer<ffi::F32>>()  // health
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // alive
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dist
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // detected
                                  .Arg<ffi::Buffer<ffi::F32>>()  // comm_noise
                                  .Arg<ffi::Buffer<ffi::F32>>()  // boxes
                                  .Arg<ffi::Buffer<ffi::F32>>()  // waypoint
                                  .Arg<ffi::Buffer<ffi::F32>>()  // waypoint_time
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("m")
                                  .Attr<int64_t>("n_boxes")
                                  .Attr<bool>("stochastic_comm")
                                  .Attr<bool>("waypoints")
                                  .Attr<float>("comm_range")
                                  .Attr<float>("inv_lx")
                                  .Attr<float>("inv_ly")
                                  .Attr<float>("inv_z")
                                  .Attr<float>("inv_diag")
                                  .Attr<float>("lx")
                                  .Attr<float>("ly")
                                  .Attr<ffi::Span<const int64_t>>("teams")
                                  .Attr<ffi::Span<const float>>("sprites"));
