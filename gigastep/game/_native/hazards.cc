// The hazards of a batch of games in one pass (XLA FFI, CPU): who leaves the map, who
// collides, who is inside a box.
//
// The same computation as `hazards` of gigastep/game/interactions.py (with the squared
// distances it reads), written per game: XLA's CPU backend computes the collision test, an
// (n, n) rule reduced over the other agents, in a loop fusion that runs one agent at a time
// and recomputes each agent's bounds test for every pair. Every floating-point operation below
// is the one XLA performs for the JAX code, in the same order, so both paths agree bit for bit
// on every state, finite or not (tests/game/test_native_hazards.py).
//
// One thing depends on the machine: XLA's CPU backend fuses `a * b + c * d` into
// fma(a, b, c * d) (one rounding) where the host has fused multiply-adds. The Python side
// asks XLA which it does (`gigastep.game._native.xla_fuses_multiply_add`) and builds this file
// with GIGASTEP_XLA_FMA=1 (and -mfma on x86-64) exactly when it does.
//
// Per game: out of bounds, x < 0, x > limit_x, y < 0 or y > limit_y; agent i collides when it
// and some j != i are alive and in bounds, d2 = dx dx + dy dy < range^2 (dx = x_i - x_j,
// dy = y_i - y_j) and |z_i - z_j| < altitude; in a box: strictly inside a valid box.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "common.h"

namespace ffi = xla::ffi;

namespace {

using gigastep_native::ParallelFor;
using gigastep_native::CheckShape;
using gigastep_native::F4;
using gigastep_native::I4;
using gigastep_native::Load;
using gigastep_native::LoadI;
using gigastep_native::Madd4;
using gigastep_native::Splat;
using gigastep_native::SplatI;

constexpr char kTarget[] = "gigastep_hazards";  // in error messages

constexpr int kMaxAgents = 64;
constexpr int kMaxBoxes = 64;

struct Params {
  int n, nb;
  bool collisions;
  float limit_x, limit_y, coll_r2, coll_alt;
};

void HazardsOfGame(const Params& p, const float* x, const float* y, const float* z,
                   const bool* alive, const float* boxes, const bool* box_valid, bool* out) {
  const int n = p.n, pad = (n + 3) & ~3;
  alignas(16) float X[kMaxAgents], Y[kMaxAgents], Z[kMaxAgents];
  // per agent, as lane masks (all bits set or none): out of bounds; alive and in bounds;
  // inside a valid box
  alignas(16) int32_t O[kMaxAgents], A[kMaxAgents], B[kMaxAgents];
  for (int j = 0; j < pad; ++j) {
    const bool in = j < n;
    X[j] = in ? x[j] : 0.0f;
    Y[j] = in ? y[j] : 0.0f;
    Z[j] = in ? z[j] : 0.0f;
    A[j] = in && alive[j] ? -1 : 0;
  }
  const F4 zero = Splat(0.0f), lx = Splat(p.limit_x), ly = Splat(p.limit_y);
  for (int w = 0; w < pad; w += 4) {  // four agents at a time
    const F4 xs = Load(X + w), ys = Load(Y + w);
    const I4 oob = (xs < zero) | (xs > lx) | (ys < zero) | (ys > ly);
    I4 inside = SplatI(0);
    for (int b = 0; b < p.nb; ++b) {
      if (!box_valid[b]) continue;
      const float* box = boxes + 4 * b;
      inside |= (xs > Splat(box[0])) & (xs < Splat(box[2])) & (ys > Splat(box[1])) &
                (ys < Splat(box[3]));
    }
    std::memcpy(O + w, &oob, sizeof oob);
    std::memcpy(B + w, &inside, sizeof inside);
    const I4 ok = LoadI(A + w) & ~oob;
    std::memcpy(A + w, &ok, sizeof ok);
  }
  const F4 r2 = Splat(p.coll_r2), alt = Splat(p.coll_alt);
  const I4 lanes = I4{0, 1, 2, 3};
  for (int i = 0; i < n; ++i) {
    bool collided = false;
    if (p.collisions && A[i] != 0) {
      const F4 xi = Splat(X[i]), yi = Splat(Y[i]), zi = Splat(Z[i]);
      I4 hit = SplatI(0);
      for (int w = 0; w < pad; w += 4) {
        const F4 dx = xi - Load(X + w), dy = yi - Load(Y + w);
        const F4 d2 = Madd4(dx, dx, dy * dy);
        const F4 dz = (F4)((I4)(zi - Load(Z + w)) & SplatI(0x7FFFFFFF));  // |z_i - z_j|
        hit |= (d2 < r2) & (dz < alt) & LoadI(A + w) & (lanes + w != SplatI(i));
      }
      collided = (hit[0] | hit[1] | hit[2] | hit[3]) != 0;
    }
    out[3 * i] = O[i] != 0;
    out[3 * i + 1] = collided;
    out[3 * i + 2] = B[i] != 0;
  }
}

ffi::Error HazardsImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> y,
                       ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::PRED> alive,
                       ffi::Buffer<ffi::F32> boxes, ffi::Buffer<ffi::PRED> box_valid,
                       ffi::ResultBuffer<ffi::PRED> hazard, bool collisions, float limit_x,
                       float limit_y, float coll_r2, float coll_alt) {
  const auto dims = x.dimensions();
  if (dims.size() < 1) {
    return ffi::Error::InvalidArgument(
        "gigastep_hazards: operand x has shape (), expected (..., n): an agent axis");
  }
  const int64_t n64 = dims.back();
  if (n64 < 1 || n64 > kMaxAgents) {
    return ffi::Error::InvalidArgument("gigastep_hazards: x has n = " + std::to_string(n64) +
                                       " agents, expected 1 to 64");
  }
  const std::vector<int64_t> lead(dims.begin(), dims.end() - 1);
  const auto box_dims = boxes.dimensions();
  const int64_t nb = box_dims.size() == lead.size() + 2 ? box_dims[lead.size()] : -1;
  if (nb > kMaxBoxes) {
    return ffi::Error::InvalidArgument("gigastep_hazards: " + std::to_string(nb) +
                                       " boxes per map, expected at most 64");
  }
  const int64_t nb0 = std::max<int64_t>(nb, 0);
  for (const ffi::Error& err : {
           CheckShape(kTarget, "y", y.dimensions(), lead, {n64}),
           CheckShape(kTarget, "z", z.dimensions(), lead, {n64}),
           CheckShape(kTarget, "alive", alive.dimensions(), lead, {n64}),
           CheckShape(kTarget, "boxes", box_dims, lead, {nb0, 4}),
           CheckShape(kTarget, "box_valid", box_valid.dimensions(), lead, {nb0}),
           CheckShape(kTarget, "hazard", hazard->dimensions(), lead, {n64, 3}),
       }) {
    if (err.failure()) return err;
  }
  const int n = static_cast<int>(n64);
  const Params p{n, static_cast<int>(nb0), collisions && n > 1, limit_x, limit_y, coll_r2,
                 coll_alt};
  const int64_t games = x.element_count() / n;
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t a = b * n;
      HazardsOfGame(p, x.typed_data() + a, y.typed_data() + a, z.typed_data() + a,
                    alive.typed_data() + a, boxes.typed_data() + b * nb0 * 4,
                    box_valid.typed_data() + b * nb0, hazard->typed_data() + 3 * a);
    }
  };
  // ~0.1 us per game of 5 vs 5: chunks of >= 256 games keep the scheduling cost small.
  ParallelFor(pool, games, std::max<int64_t>(1, 256 * 10 / n), body);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GigastepHazards, HazardsImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // x
                                  .Arg<ffi::Buffer<ffi::F32>>()   // y
                                  .Arg<ffi::Buffer<ffi::F32>>()   // z
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // alive
                                  .Arg<ffi::Buffer<ffi::F32>>()   // boxes
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // box_valid
                                  .Ret<ffi::Buffer<ffi::PRED>>()  // (oob, collided, in_box)
                                  .Attr<bool>("collisions")
                                  .Attr<float>("limit_x")
                                  .Attr<float>("limit_y")
                                  .Attr<float>("coll_r2")
                                  .Attr<float>("coll_alt"));
