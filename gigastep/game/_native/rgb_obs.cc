// The ego images of the RGB observation (XLA FFI, CPU), drawn one image at a time.
//
// The same drawing as gigastep/game/observations/rgb.py (`rgb_observations`), from the same
// integer inputs, which the JAX code computes (pixel positions, altitude shades, tail points,
// health-bar cuts, the waypoint's corner): this kernel does no floating-point arithmetic, so
// both paths give the same bytes on every state (tests/game/test_native_rgb.py). XLA draws
// the images phase by phase over the whole batch, each phase a pass over memory (the
// template copy) or a scatter that touches one cache line of every image per point; here each
// image is copied from its template and finished while it is in the cache.
//
// Per image e of a game, in order (the rules page, "RGB observations"):
//   dead ego: all zeros. Otherwise the map's template with the border (red when damaged);
//   the health bar on py = res_y - 1 (green below the cut, white from it on); the waypoint
//   square (127, 0, 127) off the bar's row; four tail levels k (intensity 255 - 51 k): a
//   saturating add in one channel (B teammate, R enemy) for each seen agent, then every
//   channel of the ego's own k-th tail point raised to at least the intensity; the ego's
//   centre set to black; every sprite pixel raised (max) to its agent's colour. Pixels
//   outside the image are dropped.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "common.h"

namespace ffi = xla::ffi;

namespace {

using gigastep_native::ParallelFor;
using gigastep_native::ShapeText;

constexpr int kTailIntensity[4] = {204, 153, 102, 51};
constexpr int kSpriteOffsets[9][3] = {  // sprite bit, dx, dy
    {1, 0, 0},  {2, 1, 0},  {2, -1, 0}, {2, 0, 1},  {2, 0, -1},
    {4, 1, 1},  {4, 1, -1}, {4, -1, 1}, {4, -1, -1},
};

// An operand whose leading (batch) dims each equal the output's or are 1 (an operand that
// vmap did not batch over that axis): `offset(g)` is the start of game g's block.
struct Operand {
  const uint8_t* base = nullptr;
  std::vector<int64_t> stride;  // bytes per step of each leading dim; 0 where broadcast

  const uint8_t* At(const std::vector<int64_t>& index) const {
    const uint8_t* p = base;
    for (size_t d = 0; d < stride.size(); ++d) p += index[d] * stride[d];
    return p;
  }
};

// Checks `dims` = (lead dims each equal to `lead` or 1) + `tail` and fills `op`'s strides.
template <typename Dims>
ffi::Error Bind(const char* name, const Dims& dims, const std::vector<int64_t>& lead,
                const std::vector<int64_t>& tail, int64_t elem_bytes, const void* data,
                Operand* op) {
  bool ok = dims.size() == lead.size() + tail.size();
  for (size_t k = 0; ok && k < tail.size(); ++k) ok = dims[lead.size() + k] == tail[k];
  for (size_t d = 0; ok && d < lead.size(); ++d) ok = dims[d] == lead[d] || dims[d] == 1;
  if (!ok) {
    std::vector<int64_t> want(lead);
    want.insert(want.end(), tail.begin(), tail.end());
    return ffi::Error::InvalidArgument(
        std::string("gigastep_rgb_obs: operand ") + name + " has shape " + ShapeText(dims) +
        ", expected " + ShapeText(want) +
        " (each batch dim as the output's or 1; n from alive, the image size from the "
        "attributes)");
  }
  int64_t block = elem_bytes;
  for (int64_t t : tail) block *= t;
  op->base = static_cast<const uint8_t*>(data);
  op->stride.assign(lead.size(), 0);
  for (size_t d = lead.size(); d-- > 0;) {
    op->stride[d] = dims[d] == 1 ? 0 : block;
    block *= dims[d];
  }
  return ffi::Error::Success();
}

struct Params {
  int n, rx, ry, nx, ny, maps;
  bool waypoints;
  const int64_t* teams;
  const int64_t* sprites;
};

// One game's inputs (pointers into the operands).
struct Game {
  const uint8_t* templates;  // (K, 2, rx ry 3)
  int32_t map_idx;
  const bool *alive, *damaged, *seen;
  const int32_t *bar_cut, *waypoint, *px, *py, *pz, *tails;
};

inline int32_t WrapAdd(int32_t a, int32_t b) {  // int32 addition as XLA does it (wraps)
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

inline uint8_t Byte(int32_t v) {  // XLA's int32 -> uint8 conversion keeps the low byte
  return static_cast<uint8_t>(static_cast<uint32_t>(v));
}

void DrawImage(const Params& p, const Game& g, int e, uint8_t* img) {
  const int rx = p.rx, ry = p.ry, n = p.n;
  const size_t bytes = static_cast<size_t>(rx) * ry * 3;
  if (!g.alive[e]) {
    std::memset(img, 0, bytes);
    return;
  }
  auto inside = [&](int32_t x, int32_t y) { return x >= 0 && x < rx && y >= 0 && y < ry; };
  auto pixel = [&](int32_t x, int32_t y) { return img + (static_cast<size_t>(x) * ry + y) * 3; };
  // JAX indexing: a negative map index counts from the end, then the index is clamped.
  int32_t map = g.map_idx < 0 ? WrapAdd(g.map_idx, p.maps) : g.map_idx;
  map = std::min(std::max(map, 0), p.maps - 1);
  const int which = g.damaged[e] ? 1 : 0;
  std::memcpy(img, g.templates + (static_cast<size_t>(map) * 2 + which) * bytes, bytes);
  const int32_t cut = g.bar_cut[e];
  for (int32_t x = 0; x < rx; ++x) {
    uint8_t* q = pixel(x, ry - 1);
    const bool green = x < cut;
    q[0] = green ? 0 : 255;
    q[1] = 255;
    q[2] = green ? 0 : 255;
  }
  if (p.waypoints && g.waypoint[2] != 0) {
    for (int32_t i = 0; i < p.nx; ++i) {
      const int32_t x = WrapAdd(g.waypoint[0], i);
      for (int32_t j = 0; j < p.ny; ++j) {
        const int32_t y = WrapAdd(g.waypoint[1], j);
        if (inside(x, y) && y != ry - 1) {
          uint8_t* q = pixel(x, y);
          q[0] = 127;
          q[1] = 0;
          q[2] = 127;
        }
      }
    }
  }
  const bool* seen = g.seen + static_cast<size_t>(e) * n;
  const int64_t team = p.teams[e];
  for (int k = 0; k < 4; ++k) {
    const int32_t* tx = g.tails + k * n;
    const int32_t* ty = g.tails + (4 + k) * n;
    const int level = kTailIntensity[k];
    const uint8_t headroom = static_cast<uint8_t>(255 - level);
    for (int j = 0; j < n; ++j) {
      if (!seen[j] || !inside(tx[j], ty[j])) continue;
      uint8_t* q = pixel(tx[j], ty[j]) + (p.teams[j] == team ? 2 : 0);
      *q = static_cast<uint8_t>(std::min(*q, headroom) + level);
    }
    if (inside(tx[e], ty[e])) {
      uint8_t* q = pixel(tx[e], ty[e]);
      for (int c = 0; c < 3; ++c) q[c] = std::max<uint8_t>(q[c], static_cast<uint8_t>(level));
    }
  }
  if (inside(g.px[e], g.py[e])) std::memset(pixel(g.px[e], g.py[e]), 0, 3);
  for (int j = 0; j < n; ++j) {
    uint8_t colour[3];
    if (j == e) {
      colour[0] = colour[2] = Byte(WrapAdd(255, -g.pz[e]));
      colour[1] = 255;
    } else {
      const bool s = seen[j], same = p.teams[j] == team;
      colour[0] = s && !same ? 255 : 0;
      colour[1] = s ? Byte(g.pz[j]) : 0;
      colour[2] = s && same ? 255 : 0;
    }
    for (const auto& off : kSpriteOffsets) {
      if (!(p.sprites[j] & off[0])) continue;
      const int32_t x = g.px[j] + off[1], y = g.py[j] + off[2];
      if (!inside(x, y)) continue;
      uint8_t* q = pixel(x, y);
      for (int c = 0; c < 3; ++c) q[c] = std::max(q[c], colour[c]);
    }
  }
}

ffi::Error RgbObsImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::U8> templates,
                      ffi::Buffer<ffi::S32> map_idx, ffi::Buffer<ffi::PRED> alive,
                      ffi::Buffer<ffi::PRED> damaged, ffi::Buffer<ffi::S32> bar_cut,
                      ffi::Buffer<ffi::S32> waypoint, ffi::Buffer<ffi::S32> px,
                      ffi::Buffer<ffi::S32> py, ffi::Buffer<ffi::S32> pz,
                      ffi::Buffer<ffi::S32> tails, ffi::Buffer<ffi::PRED> seen,
                      ffi::ResultBuffer<ffi::U8> out, int64_t res_x, int64_t res_y,
                      int64_t waypoint_nx, int64_t waypoint_ny, bool waypoints,
                      ffi::Span<const int64_t> teams, ffi::Span<const int64_t> sprites) {
  const auto out_dims = out->dimensions();
  const auto alive_dims = alive.dimensions();
  if (out_dims.size() < 4 || alive_dims.size() < 1) {
    return ffi::Error::InvalidArgument("gigastep_rgb_obs: expected alive (..., n) and the "
                                       "output (..., n, res_x, res_y, 3)");
  }
  const int64_t n = alive_dims.back();
  if (n < 1 || static_cast<int64_t>(teams.size()) != n ||
      static_cast<int64_t>(sprites.size()) != n || res_x < 1 || res_y < 1 ||
      res_x > (1 << 15) || res_y > (1 << 15) || waypoint_nx < 1 || waypoint_ny < 1 ||
      waypoint_nx > (1 << 15) || waypoint_ny > (1 << 15)) {
    return ffi::Error::InvalidArgument(
        "gigastep_rgb_obs: inconsistent attributes: alive has n = " + std::to_string(n) +
        " agents, teams " + std::to_string(teams.size()) + ", sprites " +
        std::to_string(sprites.size()) + ", image " + std::to_string(res_x) + " x " +
        std::to_string(res_y) + ", waypoint " + std::to_string(waypoint_nx) + " x " +
        std::to_string(waypoint_ny) + " pixels (each 1..32768)");
  }
  const std::vector<int64_t> lead(out_dims.begin(), out_dims.end() - 4);
  const auto t_dims = templates.dimensions();
  const int64_t maps = t_dims.size() == lead.size() + 3 ? t_dims[lead.size()] : 0;
  const int64_t bytes = res_x * res_y * 3;
  Operand op[11], out_op;
  for (const ffi::Error& err : {
           Bind("out", out_dims, lead, {n, res_x, res_y, 3}, 1, nullptr, &out_op),
           Bind("templates", t_dims, lead, {std::max<int64_t>(maps, 1), 2, bytes}, 1,
                templates.untyped_data(), &op[0]),
           Bind("map_idx", map_idx.dimensions(), lead, {}, 4, map_idx.untyped_data(), &op[1]),
           Bind("alive", alive_dims, lead, {n}, 1, alive.untyped_data(), &op[2]),
           Bind("damaged", damaged.dimensions(), lead, {n}, 1, damaged.untyped_data(), &op[3]),
           Bind("bar_cut", bar_cut.dimensions(), lead, {n}, 4, bar_cut.untyped_data(), &op[4]),
           Bind("waypoint", waypoint.dimensions(), lead, {3}, 4, waypoint.untyped_data(),
                &op[5]),
           Bind("px", px.dimensions(), lead, {n}, 4, px.untyped_data(), &op[6]),
           Bind("py", py.dimensions(), lead, {n}, 4, py.untyped_data(), &op[7]),
           Bind("pz", pz.dimensions(), lead, {n}, 4, pz.untyped_data(), &op[8]),
           Bind("tails", tails.dimensions(), lead, {2, 4, n}, 4, tails.untyped_data(), &op[9]),
           Bind("seen", seen.dimensions(), lead, {n, n}, 1, seen.untyped_data(), &op[10]),
       }) {
    if (err.failure()) return err;
  }
  Params p;
  p.n = static_cast<int>(n);
  p.rx = static_cast<int>(res_x);
  p.ry = static_cast<int>(res_y);
  p.nx = static_cast<int>(waypoint_nx);
  p.ny = static_cast<int>(waypoint_ny);
  p.maps = static_cast<int>(maps);
  p.waypoints = waypoints;
  p.teams = teams.begin();
  p.sprites = sprites.begin();
  int64_t games = 1;
  for (int64_t d : lead) games *= d;
  uint8_t* out_data = out->typed_data();
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(lead.size());
    for (int64_t image = begin; image < end; ++image) {
      const int64_t b = image / n;
      const int e = static_cast<int>(image % n);
      for (size_t d = lead.size(), rest = b; d-- > 0;) {
        index[d] = static_cast<int64_t>(rest % lead[d]);
        rest /= lead[d];
      }
      Game g;
      g.templates = op[0].At(index);
      g.map_idx = *reinterpret_cast<const int32_t*>(op[1].At(index));
      g.alive = reinterpret_cast<const bool*>(op[2].At(index));
      g.damaged = reinterpret_cast<const bool*>(op[3].At(index));
      g.bar_cut = reinterpret_cast<const int32_t*>(op[4].At(index));
      g.waypoint = reinterpret_cast<const int32_t*>(op[5].At(index));
      g.px = reinterpret_cast<const int32_t*>(op[6].At(index));
      g.py = reinterpret_cast<const int32_t*>(op[7].At(index));
      g.pz = reinterpret_cast<const int32_t*>(op[8].At(index));
      g.tails = reinterpret_cast<const int32_t*>(op[9].At(index));
      g.seen = reinterpret_cast<const bool*>(op[10].At(index));
      DrawImage(p, g, e, out_data + image * bytes);
    }
  };
  // ~1-2 us per 84 x 84 image (mostly its copy): chunks of >= 32 images.
  ParallelFor(pool, games * n, 32, body);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GigastepRgbObs, RgbObsImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::U8>>()    // templates
                                  .Arg<ffi::Buffer<ffi::S32>>()   // map_idx
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // alive
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // damaged
                                  .Arg<ffi::Buffer<ffi::S32>>()   // bar_cut
                                  .Arg<ffi::Buffer<ffi::S32>>()   // waypoint (x0, y0, active)
                                  .Arg<ffi::Buffer<ffi::S32>>()   // px
                                  .Arg<ffi::Buffer<ffi::S32>>()   // py
                                  .Arg<ffi::Buffer<ffi::S32>>()   // pz
                                  .Arg<ffi::Buffer<ffi::S32>>()   // tails (tx, ty)
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // seen
                                  .Ret<ffi::Buffer<ffi::U8>>()
                                  .Attr<int64_t>("res_x")
                                  .Attr<int64_t>("res_y")
                                  .Attr<int64_t>("waypoint_nx")
                                  .Attr<int64_t>("waypoint_ny")
                                  .Attr<bool>("waypoints")
                                  .Attr<ffi::Span<const int64_t>>("teams")
                                  .Attr<ffi::Span<const int64_t>>("sprites"));
