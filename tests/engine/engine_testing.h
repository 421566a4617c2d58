// Engine test helpers: random host tensors, one-layer networks, and float64 comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "engine/network.h"
#include "engine/runtime.h"

namespace kiln::engine::testing {

// Uniform random values in [lo, hi) (integers: rounded) of any dtype, deterministic per seed.
HostTensor random_tensor(DataType dtype, const Shape& shape, uint64_t seed, double lo = -2,
                         double hi = 2);
// A constant of the network holding random_tensor(f32, shape, seed, -0.5, 0.5) (weights).
TensorId random_constant(Network& net, const std::string& name, const Shape& shape, uint64_t seed);
HostTensor tensor_from(DataType dtype, const Shape& shape, const std::vector<double>& values);
// How many layers of `net` have params P (GatherParams, SliceParams, ...).
template <class P>
int count_layers(const Network& net) {
  int n = 0;
  for (const Layer& l : net.layers()) n += std::holds_alternative<P>(l.params);
  return n;
}
// Every element as double (f16/bf16 widened, integers exact up to 2^53).
std::vector<double> to_doubles(const HostTensor& t);
// activate(k, y, alpha, beta) (scalar_ops.h) of every element of an f32 tensor, but `nan_to` for
// a NaN element unless `nan_to` is NaN itself: the expected output of a fused activation.
std::vector<double> activated(const HostTensor& y, ActivationKind k, double alpha, double beta,
                              double nan_to);

// Runs `net` (built or not) once on a CPU engine.
std::vector<HostTensor> run_engine(const Network& net, const std::vector<HostTensor>& inputs);

// Builds a network with one input per tensor in `inputs` (static shapes), adds what `build`
// adds on top (it returns the outputs to mark), builds an engine and runs it once.
std::vector<HostTensor> run_network(
    const std::vector<HostTensor>& inputs,
    const std::function<std::vector<TensorId>(Network&, const std::vector<TensorId>&)>& build);

// Single layer shortcut: run_layer(params, inputs) -> outputs.
std::vector<HostTensor> run_one_layer(const LayerParams& params,
                                      const std::vector<HostTensor>& inputs);

// |a - b| <= atol + rtol * |b| elementwise (NaN equals NaN); reports the first mismatch.
::testing::AssertionResult near(const HostTensor& actual, const std::vector<double>& expected,
                                double rtol = 1e-5, double atol = 1e-6);

// An activation to fuse into a layer's epilogue, and what the fused result must give for NaN
// (`nan_to`; NaN: what activate() gives), within `tol` relative and tol / 2 absolute.
struct FusedActivation {
  ActivationKind kind;
  double alpha = 0, beta = 0;
  double nan_to = std::nan("");
  double tol = 2e-6;
};

// Runs the layer of `p` (params with a `post` epilogue and no activation in it) on `inputs`, then
// with each of `acts` fused, and expects each result to be the plain one activated(); `what`
// names the case in failures.
template <class P>
void expect_fused_activations(P p, const std::vector<HostTensor>& inputs,
                              const std::vector<FusedActivation>& acts, const std::string& what) {
  const auto plain = run_one_layer(p, inputs);
  for (const FusedActivation& a : acts) {
    p.post.activation = a.kind;
    p.post.alpha = a.alpha, p.post.beta = a.beta;
    const auto got = run_one_layer(p, inputs);
    const auto want = activated(plain[0], a.kind, a.alpha, a.beta, a.nan_to);
    EXPECT_TRUE(near(got[0], want, a.tol, a.tol / 2))
        << activation_name(a.kind) << " " << a.alpha << " " << a.beta << ", " << what;
  }
}

// Row-major index helpers for references written as loops.
int64_t flat_index(const Shape& shape, const std::vector<int64_t>& index);
std::vector<int64_t> unflatten(const Shape& shape, int64_t flat);
// Index of `out_index` (of a broadcast output) in an input of shape `in`.
int64_t broadcast_index(const Shape& in, const Shape& out, const std::vector<int64_t>& out_index);

// x [N, 2, H, W] (dims dynamic within `profile`) -> 3x3 convolution to 4 channels -> linear resize
// by `scales` -> GELU: per-shape kernel state (convolution plans, resize taps) for tests that
// call one engine at many shapes.
Network conv_resize_network(const Profile& profile, const std::vector<double>& scales);

// x [n, d] f32 and keep [n] bool, n dynamic within {1, opt, max} -> x[keep] as the converters
// write it (a gather of x's rows at nonzero(keep)'s rows, a count known only while running) ->
// ReLU: outputs y [count, d], total (the sum over the rows, [d]) and shape (y's shape as i64 [2]).
Network masked_rows_network(int64_t d, int64_t opt, int64_t max);

// A mask of `kind`: 0 none set, 1 all set, 2 about `density` of the elements set (with a NaN and
// a -0.5 among them in f32 masks: both nonzero).
HostTensor mask_of(DataType dtype, const Shape& shape, int kind, uint64_t seed,
                   double density = 0.33);

// Deterministic draws in [lo, hi] (a 64-bit LCG), for random shapes.
class ShapeDraws {
 public:
  explicit ShapeDraws(uint64_t seed) : state_(seed) {}
  int64_t next(int64_t lo, int64_t hi) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int64_t>((state_ >> 33) % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

// An environment variable set (a value) or unset (nullopt) for the scope, restored after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  void set(const std::string& value) { setenv(name_.c_str(), value.c_str(), 1); }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace kiln::engine::testing
