// Engine test helpers.
#include "engine_testing.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "engine/cpu/convert.h"
#include "engine/scalar_ops.h"

namespace kiln::engine::testing {

HostTensor random_tensor(DataType dtype, const Shape& shape, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  HostTensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    if (dtype == DataType::kBool) {
      store_as<int64_t>(dtype, t.data(), i, v > (lo + hi) / 2);
    } else if (!is_floating(dtype)) {
      store_as<int64_t>(dtype, t.data(), i, static_cast<int64_t>(std::llround(v)));
    } else {
      store_as<float>(dtype, t.data(), i, static_cast<float>(v));
    }
  }
  return t;
}

TensorId random_constant(Network& net, const std::string& name, const Shape& shape, uint64_t seed) {
  const HostTensor t = random_tensor(DataType::kF32, shape, seed, -0.5, 0.5);
  const float* v = t.as<float>();
  return net.add_constant(name, Weights::from_floats(shape, std::vector<float>(v, v + t.numel())));
}

HostTensor tensor_from(DataType dtype, const Shape& shape, const std::vector<double>& values) {
  HostTensor t(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i) {
    if (is_floating(dtype)) {
      store_as<float>(dtype, t.data(), i, static_cast<float>(values[static_cast<size_t>(i)]));
    } else {
      store_as<int64_t>(dtype, t.data(), i, static_cast<int64_t>(values[static_cast<size_t>(i)]));
    }
  }
  return t;
}

std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    out[static_cast<size_t>(i)] =
        is_floating(t.dtype()) ? load_as<float>(t.dtype(), t.data(), i)
                               : static_cast<double>(load_as<int64_t>(t.dtype(), t.data(), i));
  }
  return out;
}

std::vector<HostTensor> run_engine(const Network& net, const std::vector<HostTensor>& inputs) {
  auto engine = std::make_shared<const Engine>(net);
  ExecutionContext ctx(engine);
  return ctx.run(inputs);
}

std::vector<HostTensor> run_network(
    const std::vector<HostTensor>& inputs,
    const std::function<std::vector<TensorId>(Network&, const std::vector<TensorId>&)>& build) {
  Network net;
  std::vector<TensorId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ids.push_back(net.add_input("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
  }
  for (TensorId out : build(net, ids)) net.mark_output(out);
  auto engine = std::make_shared<const Engine>(std::move(net));
  ExecutionContext ctx(engine);
  return ctx.run(inputs);
}

std::vector<HostTensor> run_one_layer(const LayerParams& params,
                                      const std::vector<HostTensor>& inputs) {
  return run_network(inputs, [&](Network& net, const std::vector<TensorId>& ids) {
    return net.add_layer("layer", params, ids);
  });
}

std::vector<double> activated(const HostTensor& y, ActivationKind k, double alpha, double beta,
                              double nan_to) {
  std::vector<double> r;
  const float* v = y.as<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    r.push_back(std::isnan(v[i]) && !std::isnan(nan_to)
                    ? nan_to
                    : activate(k, v[i], static_cast<float>(alpha), static_cast<float>(beta)));
  }
  return r;
}

::testing::AssertionResult near(const HostTensor& actual, const std::vector<double>& expected,
                                double rtol, double atol) {
  const auto a = to_doubles(actual);
  if (a.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "got " << a.size() << " elements, expected " << expected.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = expected[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(y) && x == y) continue;
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << shape_to_string(actual.shape()) << ": got " << x
             << ", expected " << y;
    }
  }
  return ::testing::AssertionSuccess();
}

int64_t flat_index(const Shape& shape, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

std::vector<int64_t> unflatten(const Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return index;
}

int64_t broadcast_index(const Shape& in, const Shape& out, const std::vector<int64_t>& out_index) {
  std::vector<int64_t> idx(in.size());
  const size_t offset = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) idx[d] = in[d] == 1 ? 0 : out_index[d + offset];
  return flat_index(in, idx);
}

Network conv_resize_network(const Profile& profile, const std::vector<double>& scales) {
  Network net;
  const auto x = net.add_input("x", DataType::kF32, {kDynamic, 2, kDynamic, kDynamic}, profile);
  ConvolutionParams c;
  c.strides = {1, 1};
  c.padding_begin = c.padding_end = {1, 1};
  c.dilations = {1, 1};
  std::vector<float> wv(4 * 2 * 9);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.05f * static_cast<float>(i % 7) - 0.1f;
  auto y = net.add("conv", c, {x, net.add_constant("w", Weights::from_floats({4, 2, 3, 3}, wv))});
  y = net.add("up", ResizeParams{ResizeMode::kLinear, {}, scales, false}, {y});
  net.mark_output(net.add("gelu", ActivationParams{ActivationKind::kGelu}, {y}), "y");
  return net;
}

Network masked_rows_network(int64_t d, int64_t opt, int64_t max) {
  Network net;
  const auto x =
      net.add_input("x", DataType::kF32, {kDynamic, d}, Profile{{1, d}, {opt, d}, {max, d}});
  const auto keep = net.add_input("keep", DataType::kBool, {kDynamic}, Profile{{1}, {opt}, {max}});
  const auto nz = net.add_layer("nz", NonZeroParams{}, {keep});
  ShuffleParams flat;
  flat.has_reshape = true;
  flat.reshape = {-1};
  const auto rows = net.add("rows", flat, {nz[0]});
  const auto picked = net.add("picked", GatherParams{}, {x, rows});
  const auto act = net.add("relu", ActivationParams{ActivationKind::kRelu}, {picked});
  net.mark_output(act, "y");
  net.mark_output(net.add("total", ReduceParams{ReduceOp::kSum, {0}, false}, {act}), "total");
  net.mark_output(net.add("count", ShapeParams{}, {act}), "shape");
  return net;
}

HostTensor mask_of(DataType dtype, const Shape& shape, int kind, uint64_t seed, double density) {
  const auto u = to_doubles(random_tensor(DataType::kF32, shape, seed, 0, 1));
  std::vector<double> v(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    v[i] = kind == 0 ? 0 : kind == 1 ? 1 : u[i] < density ? 1 : 0;
  }
  if (dtype == DataType::kF32 && kind == 2 && !v.empty()) {
    v[0] = std::numeric_limits<double>::quiet_NaN();
    v[v.size() / 2] = v[v.size() / 2] ? -0.5 : 0;
  }
  return tensor_from(dtype, shape, v);
}

}  // namespace kiln::engine::testing
