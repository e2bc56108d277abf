// Visibility + vector observation of a batch of games in one pass (XLA FFI, CPU).
//
// The same computation as gigastep/game/observations/visibility.py followed by
// gigastep/game/observations/vector.py (with the planar distances of
// gigastep/game/interactions.py `geometry`, computed here from the positions so that XLA
// need not write a (games, n, n) matrix out), written per game so that nothing is recomputed
// per element: XLA's CPU backend re-evaluates fused producers (bit sets, the counting sort)
// for every element of a gathered consumer. Every floating-point operation below is the one
// XLA's CPU backend performs for the JAX code, in the same order, so the two paths agree bit
// for bit on every state, except that where both give NaN its sign and payload bits are not
// promised; tests/game/test_native_vector_obs.py and tests/game/test_nonfinite.py hold them
// to that.
// Non-finite states are defined, in both paths alike: an agent whose x, y, z, heading or
// speed is not finite is seen by nobody, observes all zeros (as a dead ego) and shares
// nothing, not even its detections; a seen agent at a distance that is not below +inf sorts
// after every smaller distance (as if at FLT_MAX), so seen agents always fill the rows right
// after the ego.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cfloat>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "common.h"

namespace ffi = xla::ffi;

namespace {

using gigastep_native::CheckShape;
using gigastep_native::F4;
using gigastep_native::I4;
using gigastep_native::Load;
using gigastep_native::Madd4;
using gigastep_native::ParallelFor;
using gigastep_native::Splat;
using gigastep_native::SplatI;
using gigastep_native::Sqrt4;

constexpr char kTarget[] = "gigastep_vector_obs";  // in error messages

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
  const float *x, *y, *z, *h, *v, *health, *comm, *boxes, *waypoint;
  // planar distances, row e at dist + e * stride (stride: n rounded up to 4 lanes), computed
  // by ObserveGame from x and y
  const float* dist;
  int stride;
  const uint32_t* stream;  // when comm is null: (seed0, seed1, start)
  const bool *alive, *detected;
  float waypoint_time;
  float* out;
};

// gigastep/random.py: Wellons' lowbias32 hash, and uniform numbers k, k + 1, k + 2, k + 3
// of a counter stream (seed0, seed1, start), four lanes at a time:
// lowbias32(lowbias32((start + k) * golden ^ seed0) + seed1) >> 8, times 2^-24. Unsigned
// arithmetic wraps as XLA's uint32 does.
typedef uint32_t U4 __attribute__((vector_size(16)));
inline U4 LowBias32(U4 x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}
inline F4 StreamUniform4(const uint32_t* stream, int k) {
  const U4 counter = stream[2] + static_cast<uint32_t>(k) + U4{0, 1, 2, 3};
  const U4 bits = LowBias32(LowBias32((counter * 0x9E3779B9u) ^ stream[0]) + stream[1]);
  return __builtin_convertvector(bits >> 8, F4) * 0x1p-24f;
}

// floor, four lanes, without a libm call (baseline x86-64 has no rounding instruction):
// exact for every float, as floats of magnitude >= 2^23 (and NaN, inf) are returned
// unchanged; the others are truncated toward zero (in int32 range, so the conversion is
// defined) and stepped down where that rounded up.
inline F4 Floor4(F4 a) {
  const I4 small = (F4)((I4)a & SplatI(0x7FFFFFFF)) < Splat(8388608.0f);
  const F4 c = (F4)((I4)a & small);
  const F4 t = __builtin_convertvector(__builtin_convertvector(c, I4), F4);
  const F4 f = t - (F4)((I4)Splat(1.0f) & (t > c));
  return (F4)(((I4)f & small) | ((I4)a & ~small));
}

// wrap_angle of gigastep/dynamics.py, a - 2 pi floor((a + pi) / (2 pi)), four lanes,
// evaluated the way XLA's CPU backend evaluates it: the division by the constant 2 pi becomes
// a multiplication by its float32 reciprocal, and where XLA fuses multiply-adds
// (GIGASTEP_XLA_FMA, see `gigastep.game._native.xla_fuses_multiply_add`) a - 2 pi k is one
// multiply-add (one rounding), else a product and a difference (two).
inline F4 WrapAngle4(F4 a) {
  const float two_pi = static_cast<float>(2.0 * M_PI), pi = static_cast<float>(M_PI);
  const F4 k = Floor4((a + Splat(pi)) * Splat(1.0f / two_pi));
  return Madd4(Splat(-two_pi), k, a);
}

// Bit j set iff lane j of the four-lane mask is set.
inline uint32_t MaskBits(I4 mask) {
#if defined(__SSE__)
  return static_cast<uint32_t>(_mm_movemask_ps((__m128)mask));
#else
  return (mask[0] & 1) | (mask[1] & 2) | (mask[2] & 4) | (mask[3] & 8);
#endif
}

// Bit j set iff agent j is alive and its x, y, z, heading and speed are finite: only these
// agents share, see or are seen (finite[] of visibility.py; a NaN compares false with
// everything, so the rules below would otherwise depend on where a NaN sits).
uint64_t Observable(const Params& p, const Game& g, uint64_t* finite_bits) {
  uint64_t valid = 0, finite = 0;
  for (int j = 0; j < p.n; ++j) {
    const bool ok = std::isfinite(g.x[j]) && std::isfinite(g.y[j]) && std::isfinite(g.z[j]) &&
                    std::isfinite(g.h[j]) && std::isfinite(g.v[j]);
    finite |= static_cast<uint64_t>(ok) << j;
    valid |= static_cast<uint64_t>(ok && g.alive[j]) << j;
  }
  *finite_bits = finite;
  return valid;
}

// seen[e] as a bit set over i (visibility.py); `alive` is Observable's bit set.
void Visibility(const Params& p, const Game& g, uint64_t alive, uint64_t finite,
                uint64_t* seen) {
  const int n = p.n;
  uint64_t det[kMaxAgents];  // det[i]: bit j set iff j (finite) detects i
#if defined(__SSE2__)
  __m128i det16[2] = {};  // for n <= 16: det[0..16) as 16-bit lanes (0 past n)
  if (n <= 16) {  // a row of bools (bytes 0 or 1) at a time, from a padded copy
    alignas(16) uint8_t rows[16 * 16 + 16];
    alignas(16) uint16_t d16[16] = {};
    std::memcpy(rows, g.detected, static_cast<size_t>(n) * n);
    std::memset(rows + n * n, 0, 16);  // the last rows' loads reach past the matrix
    for (int i = 0; i < n; ++i) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + i * n));
      const uint32_t bits = static_cast<uint32_t>(
          _mm_movemask_epi8(_mm_cmpgt_epi8(bytes, _mm_setzero_si128())));
      det[i] = bits & finite;  // finite has no bits past n
      d16[i] = static_cast<uint16_t>(det[i]);
    }
    det16[0] = _mm_load_si128(reinterpret_cast<const __m128i*>(d16));
    det16[1] = _mm_load_si128(reinterpret_cast<const __m128i*>(d16 + 8));
  } else
#endif
  {
    for (int i = 0; i < n; ++i) {
      uint64_t b = 0;
      for (int j = 0; j < n; ++j) b |= static_cast<uint64_t>(g.detected[i * n + j]) << j;
      det[i] = b & finite;
    }
  }
  uint64_t team1 = 0;
  for (int j = 0; j < n; ++j) team1 |= static_cast<uint64_t>(p.teams[j] == 1) << j;
  if (p.stochastic_comm) {
    for (int e = 0; e < n; ++e) {
      if (!((alive >> e) & 1)) {  // a dead (or non-finite) ego sees nothing
        seen[e] = 0;
        continue;
      }
      // Teammates j that share with e: alive, and ratio <= noise. Four j at a time (the
      // distance rows are padded to whole vectors; lanes of other agents are masked off).
      uint64_t share = 0;
      const uint64_t mates = (p.teams[e] == 1 ? team1 : ~team1) & alive;
      const float* drow = g.dist + e * g.stride;
      for (int w = 0; w < n; w += 4) {
        if (((mates >> w) & 0xF) == 0) continue;
        const F4 d = Load(drow + w);
        F4 ratio;
        if (p.comm_range > 0) {  // std::min(std::max(t, 0), 1), as selects
          const F4 t = d * Splat(p.inv_comm_range);
          const F4 lo = (F4)((I4)t & ~(t < Splat(0.0f)));
          const I4 over = Splat(1.0f) < lo;
          ratio = (F4)(((I4)Splat(1.0f) & over) | ((I4)lo & ~over));
        } else {
          ratio = (F4)((I4)Splat(1.0f) & (d > Splat(0.0f)));
        }
        F4 u;
        if (g.comm != nullptr) {
          alignas(16) float c[4] = {};
          for (int k = 0; k < 4 && w + k < n; ++k) c[k] = g.comm[e * n + w + k];
          u = Load(c);
        } else {
          u = StreamUniform4(g.stream, e * n + w);
        }
        share |= static_cast<uint64_t>(MaskBits(ratio <= u)) << w;
      }
      share &= mates;
      uint64_t row = share;  // i itself shares, or a sharing teammate detects i
#if defined(__SSE2__)
      if (n <= 16) {  // eight agents' detector sets per compare
        const __m128i s16 = _mm_set1_epi16(static_cast<int16_t>(share));
        const __m128i none0 = _mm_cmpeq_epi16(_mm_and_si128(det16[0], s16), _mm_setzero_si128());
        const __m128i none1 = _mm_cmpeq_epi16(_mm_and_si128(det16[1], s16), _mm_setzero_si128());
        const uint32_t none = static_cast<uint32_t>(
            _mm_movemask_epi8(_mm_packs_epi16(none0, none1)));
        row |= ~none & ((uint32_t{1} << n) - 1);
      } else
#endif
      {
        for (int i = 0; i < n; ++i) row |= static_cast<uint64_t>((share & det[i]) != 0) << i;
      }
      seen[e] = row & finite;
    }
  } else {
    uint64_t by_team1 = 0, by_team0 = 0;  // bit i: agent i detected by a member of that team
    for (int i = 0; i < n; ++i) {
      by_team1 |= static_cast<uint64_t>((det[i] & team1) != 0) << i;
      by_team0 |= static_cast<uint64_t>((det[i] & ~team1) != 0) << i;
    }
    for (int e = 0; e < n; ++e) {
      const bool in1 = p.teams[e] == 1;
      const uint64_t mates = in1 ? team1 : ~team1;
      seen[e] = ((alive >> e) & 1) ? ((in1 ? by_team1 : by_team0) | (mates & alive)) & finite
                                   : 0;
    }
  }
}

// The sort key of a seen agent at distance d: d, or FLT_MAX when d is not below +inf (NaN,
// +inf), so that every seen agent sorts before the unseen ones (key +inf).
inline float SeenKey(float d) { return d < INFINITY ? d : FLT_MAX; }

// idx[0..rows): the agents of ego e's first rows, rows = min(m, agents e sees) (idx[rows] is
// scratch, so idx holds at least rows + 1 entries): the ego
// (key -1), then the agents it sees by increasing distance, ties by index (vector.py's
// stable partial sort). The remaining rows belong to unseen agents and are all zero.
void RowOrder(const Params& p, const Game& g, int e, uint64_t seen_e, int rows, int* idx) {
  const int n = p.n;
  const float* dist = g.dist + e * g.stride;
  // Every row below `rows` is written: keys are never NaN (SeenKey), so "before" is a strict
  // total order and the seen agents' counts are 0, 1, ..., count - 1.
  if (n <= kCountingSortMax) {
    // Counting sort: the row of i is the number of agents ordered before it. For each
    // seen j, compare its key with all keys at once (four 4-lane vectors; padding keys +inf) and
    // count per lane; no horizontal sums.
    const int words = (n + 3) / 4;
    const F4 inf = {INFINITY, INFINITY, INFINITY, INFINITY};
    F4 keys[4] = {inf, inf, inf, inf};
    I4 lane[4], before[4];
    for (int w = 0; w < 4; ++w) {
      lane[w] = I4{0, 1, 2, 3} + 4 * w;
      before[w] = I4{0, 0, 0, 0};
    }
    {
      // The row's keys straight into vector registers (rows are padded to whole vectors):
      // lanes past n are masked off with the unseen agents (their bits of seen_e are 0).
      const F4 fmax = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
      const I4 seen4 = I4{1, 1, 1, 1} * static_cast<int32_t>(seen_e & 0xFFFF);
      for (int w = 0; w < words; ++w) {
        F4 d;
        std::memcpy(&d, dist + 4 * w, sizeof d);
        const I4 pow2 = I4{1, 2, 4, 8} << (4 * w);
        const I4 seen_lane = (seen4 & pow2) != 0;
        const I4 key = ((I4)d & (d < inf)) | ((I4)fmax & ~(d < inf));  // SeenKey
        keys[w] = (F4)((key & seen_lane) | ((I4)inf & ~seen_lane));
      }
    }
    const F4 minus_one = {-1.0f, -1.0f, -1.0f, -1.0f};
    for (int w = 0; w < words; ++w) {  // the ego's key, -1 (a select: no scalar store)
      const I4 ego = lane[w] == e;
      keys[w] = (F4)(((I4)keys[w] & ~ego) | ((I4)minus_one & ego));
    }
    // Only seen agents (and the ego) can be before a seen agent: unseen keys are +inf.
    for (uint64_t bits = seen_e | (uint64_t{1} << e); bits; bits &= bits - 1) {
      const int j = __builtin_ctzll(bits);
      const float kj = keys[j / 4][j % 4];
      for (int w = 0; w < words; ++w) {
        // j is before lane i: key_j < key_i, or equal keys and j < i.
        before[w] -= (kj < keys[w]) | ((kj == keys[w]) & (j < lane[w]));
      }
    }
    // Each agent to its row; those at row >= rows (unseen, or seen beyond the m rows) to the
    // spare entry idx[rows] (a select, not a branch: which agents are seen is a coin flip).
    alignas(16) int32_t pos[16];
    for (int w = 0; w < words; ++w) std::memcpy(pos + 4 * w, &before[w], sizeof before[w]);
    for (int i = 0; i < n; ++i) idx[std::min<int32_t>(pos[i], rows)] = i;
    return;
  }
  // Insertion of the seen agents into the rows - 1 nearest so far; visiting i in index order
  // and inserting after equal keys keeps ties by index.
  idx[0] = e;
  float best[kMaxAgents];
  int size = 0;
  const int cap = rows - 1;
  for (uint64_t bits = seen_e & ~(uint64_t{1} << e); bits && cap > 0; bits &= bits - 1) {
    const int i = __builtin_ctzll(bits);
    const float k = SeenKey(dist[i]);
    if (size == cap && !(k < best[cap - 1])) continue;
    int pos = size < cap ? size++ : cap - 1;
    while (pos > 0 && k < best[pos - 1]) {
      best[pos] = best[pos - 1];
      idx[1 + pos] = idx[pos];
      --pos;
    }
    best[pos] = k;
    idx[1 + pos] = i;
  }
}

// dist[e * stride + i] = sqrt(dx dx + dy dy), dx = x_e - x_i, dy = y_e - y_i, as
// `geometry` computes it (XLA fusing the multiply-add where it does); stride is n rounded up
// to whole four-lane vectors, and the padding lanes hold distances to the origin.
void Distances(const Game& g, int n, int stride, float* dist) {
  alignas(16) float X[kMaxAgents], Y[kMaxAgents];
  for (int j = 0; j < stride; ++j) {
    X[j] = j < n ? g.x[j] : 0.0f;
    Y[j] = j < n ? g.y[j] : 0.0f;
  }
  for (int e = 0; e < n; ++e) {
    const F4 xe = Splat(X[e]), ye = Splat(Y[e]);
    for (int w = 0; w < stride; w += 4) {
      const F4 dx = xe - Load(X + w), dy = ye - Load(Y + w);
      const F4 d = Sqrt4(Madd4(dx, dx, dy * dy));
      std::memcpy(dist + e * stride + w, &d, sizeof d);
    }
  }
}

void ObserveGame(const Params& p, const Game& game) {
  const int n = p.n, m = p.m, L = p.L;
  alignas(16) float dist[kMaxAgents * kMaxAgents];
  Game g = game;
  g.stride = (n + 3) & ~3;
  Distances(g, n, g.stride, dist);
  g.dist = dist;
  uint64_t seen[kMaxAgents], finite;
  const uint64_t valid = Observable(p, g, &finite);
  Visibility(p, g, valid, finite, seen);
  float tail[5 + 4 * 64];  // waypoint and box values, the same for every alive ego
  const int nb = p.n_boxes, tail_size = (p.waypoints ? 5 : 0) + 4 * nb;
  float* box = tail + (p.waypoints ? 5 : 0);
  for (int b = 0; b < nb; ++b) {
    const float* src = g.boxes + 4 * b;
    box[4 * b] = src[0] * p.recip_lx;
    box[4 * b + 1] = src[1] * p.recip_ly;
    box[4 * b + 2] = src[2] * p.recip_lx;
    box[4 * b + 3] = src[3] * p.recip_ly;
  }
  const float active = g.waypoint_time > 0 ? 1.0f : 0.0f;
  alignas(16) float H[kMaxAgents];  // headings, padded to whole vectors
  for (int j = 0; j < g.stride; ++j) H[j] = j < n ? g.h[j] : 0.0f;
  int idx[kMaxAgents + 1];
  for (int e = 0; e < n; ++e) {
    float* o = g.out + static_cast<int64_t>(e) * L;
    if (!((valid >> e) & 1)) {  // a dead (or non-finite) ego observes nothing
      std::memset(o, 0, sizeof(float) * L);
      continue;
    }
    int count = 0;  // agents e sees, itself included
    for (uint64_t bits = seen[e]; bits; bits &= bits - 1) ++count;
    const int rows = std::min(count, m);
    RowOrder(p, g, e, seen[e], rows, idx);
    // Each value is XLA's d * scale (the seen flag and alive are 1 here), where
    // d = row - k * own, k = 1 for the team column and for another agent's relative features
    // (x, y, z, heading, speed), else 0; the team column becomes 1 - |d| and another agent's
    // heading difference is wrapped. Scale-1 products are left out (exact).
    const float xe = g.x[e], ye = g.y[e], ze = g.z[e], he = g.h[e], ve = g.v[e];
    alignas(16) float wrapped[kMaxAgents];  // WrapAngle(h_i - h_e) of every agent i
    for (int w = 0; w < g.stride; w += 4) {
      const F4 d = WrapAngle4(Load(H + w) - Splat(he));
      std::memcpy(wrapped + w, &d, sizeof d);
    }
    const float te = static_cast<float>(p.teams[e]), he_health = g.health[e];
    const float se = p.sprites[e];
    o[0] = 1.0f;
    o[1] = 1.0f - std::fabs(te - te);
    o[2] = (xe - 0.0f * xe) * p.inv_lx;
    o[3] = (ye - 0.0f * ye) * p.inv_ly;
    o[4] = (ze - 0.0f * ze) * p.inv_z;
    o[5] = he - 0.0f * he;
    o[6] = (ve - 0.0f * ve) * p.inv_diag;
    o[7] = he_health - 0.0f * he_health;
    o[8] = se - 0.0f * se;
    for (int r = 1; r < rows; ++r) {
      const int i = idx[r];
      float* q = o + 9 * r;
      q[0] = 1.0f;
      q[1] = 1.0f - std::fabs(static_cast<float>(p.teams[i]) - te);
      q[2] = (g.x[i] - xe) * p.inv_lx;
      q[3] = (g.y[i] - ye) * p.inv_ly;
      q[4] = (g.z[i] - ze) * p.inv_z;
      q[5] = wrapped[i];
      q[6] = (g.v[i] - ve) * p.inv_diag;
      q[7] = g.health[i] - 0.0f * he_health;
      q[8] = p.sprites[i] - 0.0f * se;
    }
    // Rows of unseen agents: +0 (the JAX path selects 0 there).
    std::memset(o + 9 * rows, 0, sizeof(float) * 9 * (m - rows));
    float* t = o + 9 * m;
    if (p.waypoints) {
      tail[0] = (g.waypoint[0] - xe) * p.recip_lx * active;
      tail[1] = (g.waypoint[1] - ye) * p.recip_ly * active;
      tail[2] = (g.waypoint[2] - xe) * p.recip_lx * active;
      tail[3] = (g.waypoint[3] - ye) * p.recip_ly * active;
      tail[4] = active;
    }
    std::memcpy(t, tail, sizeof(float) * tail_size);
  }
}

ffi::Error VectorObsImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> y,
                         ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::F32> heading,
                         ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> health,
                         ffi::Buffer<ffi::PRED> alive, ffi::Buffer<ffi::PRED> detected, ffi::AnyBuffer comm,
                         ffi::Buffer<ffi::F32> boxes, ffi::Buffer<ffi::F32> waypoint,
                         ffi::Buffer<ffi::F32> waypoint_time, ffi::ResultBuffer<ffi::F32> out,
                         int64_t m, int64_t n_boxes, bool stochastic_comm, bool waypoints,
                         float comm_range, float inv_lx, float inv_ly, float inv_z,
                         float inv_diag, float lx, float ly, ffi::Span<const int64_t> teams,
                         ffi::Span<const float> sprites) {
  const auto dims = x.dimensions();
  if (dims.size() < 1) {
    return ffi::Error::InvalidArgument("gigastep_vector_obs: operand x has shape (), expected "
                                       "(..., n): an agent axis");
  }
  const int64_t n64 = dims.back();
  if (n64 < 1 || n64 > kMaxAgents || static_cast<int64_t>(teams.size()) != n64 ||
      static_cast<int64_t>(sprites.size()) != n64 || m < 1 || m > n64) {
    return ffi::Error::InvalidArgument(
        "gigastep_vector_obs: inconsistent agent counts: x has n = " + std::to_string(n64) +
        " agents (at most 64), teams " + std::to_string(teams.size()) + ", sprites " +
        std::to_string(sprites.size()) + ", rows m = " + std::to_string(m) + " (1 <= m <= n)");
  }
  if (n_boxes < 0 || n_boxes > 64) {
    return ffi::Error::InvalidArgument("gigastep_vector_obs: n_boxes = " +
                                       std::to_string(n_boxes) + ", expected 0..64");
  }
  const int n = static_cast<int>(n64);
  const std::vector<int64_t> lead(dims.begin(), dims.end() - 1);
  const int64_t L = 9 * m + (waypoints ? 5 : 0) + 4 * n_boxes;
  const auto box_dims = boxes.dimensions();
  // Boxes: (..., NB, 4) with any NB >= n_boxes (only the first n_boxes are read).
  const int64_t nb = box_dims.size() == lead.size() + 2 ? box_dims[lead.size()] : -1;
  const bool from_stream = comm.element_type() == ffi::DataType::U32;
  if (!from_stream && comm.element_type() != ffi::DataType::F32) {
    return ffi::Error::InvalidArgument(
        "gigastep_vector_obs: operand comm must be float32 noise (..., n, n) or a uint32 "
        "stream (..., 3)");
  }
  for (const ffi::Error& err : {
           CheckShape(kTarget, "y", y.dimensions(), lead, {n64}),
           CheckShape(kTarget, "z", z.dimensions(), lead, {n64}),
           CheckShape(kTarget, "heading", heading.dimensions(), lead, {n64}),
           CheckShape(kTarget, "v", v.dimensions(), lead, {n64}),
           CheckShape(kTarget, "health", health.dimensions(), lead, {n64}),
           CheckShape(kTarget, "alive", alive.dimensions(), lead, {n64}),
           CheckShape(kTarget, "detected", detected.dimensions(), lead, {n64, n64}),
           from_stream ? CheckShape(kTarget, "comm (uint32 stream)", comm.dimensions(), lead, {3})
                       : CheckShape(kTarget, "comm (float32 noise)", comm.dimensions(), lead, {n64, n64}),
           CheckShape(kTarget, "boxes", box_dims, lead, {std::max(nb, n_boxes), 4}),
           CheckShape(kTarget, "waypoint", waypoint.dimensions(), lead, {4}),
           CheckShape(kTarget, "waypoint_time", waypoint_time.dimensions(), lead, {}),
           CheckShape(kTarget, "out", out->dimensions(), lead, {n64, L}),
       }) {
    if (err.failure()) return err;
  }
  const int64_t games = x.element_count() / n;
  Params p;
  p.n = n;
  p.m = static_cast<int>(m);
  p.n_boxes = static_cast<int>(n_boxes);
  p.box_stride = static_cast<int>(std::max<int64_t>(nb, 0)) * 4;
  p.L = static_cast<int>(L);
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
      g.detected = detected.typed_data() + aa;
      g.comm = from_stream ? nullptr : comm.typed_data<float>() + aa;
      g.stream = from_stream ? comm.typed_data<uint32_t>() + 3 * b : nullptr;
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
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // detected
                                  .Arg<ffi::AnyBuffer>()  // comm noise or stream
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
