// Investigation tool: runs every oneDNN implementation that accepts the (de)convolutions of
// ConvertConvolution.GroupsDilationDepthwise / TransposedWithOutputPaddingGroupsDilation and
// reports, per implementation, its layouts, whether each step (create, reorder, execute) works,
// and the largest difference from oneDNN's reference implementation. Links only libdnnl.
//   g++ -std=c++17 -O1 -I.deps/include tools/device/onednn_conv_probe.cpp -L.deps/lib -ldnnl
#include <cmath>
#include <cstdio>
#include <dnnl.hpp>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

using dnnl::memory;
using tag = memory::format_tag;

struct ConvCase {
  const char* name;
  bool transposed, bias;
  memory::dims x, w, out, strides, dil, pb, pe;  // w in oneDNN's [g,] o, i, k... order
};

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (auto& e : v) e = d(gen);
  return v;
}

size_t volume(const memory::dims& d) {
  size_t n = 1;
  for (auto e : d) n *= static_cast<size_t>(e);
  return n;
}

tag plain_data(size_t rank) {
  return rank == 3 ? tag::ncw : rank == 4 ? tag::nchw : tag::ncdhw;
}
tag plain_weights(const ConvCase& c) {
  const size_t sp = c.x.size() - 2;
  if (c.w.size() == sp + 3) return sp == 1 ? tag::goiw : sp == 2 ? tag::goihw : tag::goidhw;
  return sp == 1 ? tag::oiw : sp == 2 ? tag::oihw : tag::oidhw;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

std::string fmt(const memory::desc& md) {
  const auto& d = md.data;
  if (d.format_kind != dnnl_blocked) return "?";
  std::string s = "strides=";
  for (int i = 0; i < d.ndims; ++i) s += std::to_string(d.format_desc.blocking.strides[i]) + ",";
  s += " blocks=";
  for (int i = 0; i < d.format_desc.blocking.inner_nblks; ++i) {
    s += std::to_string(d.format_desc.blocking.inner_idxs[i]) + ":" +
         std::to_string(d.format_desc.blocking.inner_blks[i]) + ",";
  }
  return s;
}

// Runs the primitive of `pd` on the plain inputs; returns the plain output or an error string.
template <class PD>
std::string run(const PD& pd, const ConvCase& c, const std::vector<float>& x,
                const std::vector<float>& w, const std::vector<float>& b, std::vector<float>* y) {
  auto& eng = cpu_engine();
  dnnl::stream stream(eng);
  const auto f32 = memory::data_type::f32;
  memory::desc ux(c.x, f32, plain_data(c.x.size())), uw(c.w, f32, plain_weights(c)),
      uy(c.out, f32, plain_data(c.out.size()));
  std::string step = "alloc";
  try {
    memory mx(ux, eng, const_cast<float*>(x.data())), mw(uw, eng, const_cast<float*>(w.data())),
        my(uy, eng, y->data());
    memory px = mx, pw = mw, py = my;
    step = "reorder src";
    if (pd.src_desc() != ux) {
      px = memory(pd.src_desc(), eng);
      dnnl::reorder(mx, px).execute(stream, mx, px);
    }
    step = "reorder weights";
    if (pd.weights_desc() != uw) {
      pw = memory(pd.weights_desc(), eng);
      dnnl::reorder(mw, pw).execute(stream, mw, pw);
    }
    if (pd.dst_desc() != uy) py = memory(pd.dst_desc(), eng);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, px}, {DNNL_ARG_WEIGHTS, pw}, {DNNL_ARG_DST, py}};
    if (c.bias) {
      args[DNNL_ARG_BIAS] =
          memory(memory::desc({c.out[1]}, f32, tag::a), eng, const_cast<float*>(b.data()));
    }
    step = "create primitive";
    typename PD::primitive_kind_t prim(pd);
    step = "execute";
    prim.execute(stream, args);
    stream.wait();
    step = "reorder dst";
    if (pd.dst_desc() != uy) dnnl::reorder(py, my).execute(stream, py, my);
    stream.wait();
  } catch (const dnnl::error& e) {
    return step + ": " + e.what() + " (status " + std::to_string(e.status) + ")";
  }
  return "";
}

// The primitive type of each primitive_desc, for run().
struct ConvPD : dnnl::convolution_forward::primitive_desc {
  using primitive_desc::primitive_desc;
  using primitive_kind_t = dnnl::convolution_forward;
};
struct DeconvPD : dnnl::deconvolution_forward::primitive_desc {
  using primitive_desc::primitive_desc;
  using primitive_kind_t = dnnl::deconvolution_forward;
};

struct Result {
  std::string impl, err, layout;
  const char* layouts;
  std::vector<float> y;
};

template <class PD, class Desc>
void probe(const ConvCase& c, const Desc& desc, const char* layouts, std::vector<Result>& results) {
  auto& eng = cpu_engine();
  const auto x = random_values(volume(c.x), 1), w = random_values(volume(c.w), 2),
             b = random_values(static_cast<size_t>(c.out[1]), 3);
  try {
    PD pd(desc, eng);
    do {
      Result r;
      r.layouts = layouts;
      r.impl = pd.impl_info_str();
      r.layout = "src " + fmt(pd.src_desc()) + " wei " + fmt(pd.weights_desc()) + " dst " +
                 fmt(pd.dst_desc());
      r.y.assign(volume(c.out), NAN);
      r.err = run(pd, c, x, w, b, &r.y);
      results.push_back(std::move(r));
    } while (pd.next_impl());
  } catch (const dnnl::error& e) {
    std::printf("%s [%s]: no primitive_desc: %s\n", c.name, layouts, e.what());
  }
}

// Every implementation's output against the reference implementation's (plain layouts).
void report(const ConvCase& c, const std::vector<Result>& results) {
  const Result* ref = nullptr;
  for (const auto& r : results) {
    if (r.impl.rfind("ref", 0) == 0 && r.err.empty()) ref = &r;
  }
  for (const auto& r : results) {
    double diff = -1;
    if (ref && r.err.empty()) {
      diff = 0;
      for (size_t i = 0; i < r.y.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(r.y[i] - ref->y[i])));
        if (std::isnan(r.y[i])) diff = INFINITY;
      }
    }
    std::printf("%s [%s] impl=%-28s %s max|d-ref|=%g  %s\n", c.name, r.layouts, r.impl.c_str(),
                r.err.empty() ? "OK  " : "FAIL", diff, r.err.empty() ? "" : r.err.c_str());
    std::printf("    %s\n", r.layout.c_str());
  }
}

int main() {
  const auto f32 = memory::data_type::f32;
  const std::vector<ConvCase> cases = {
      // conv2d x[2,6,12,10] w[4,3,3,3] groups 2, padding 2, dilation (2,3), bias
      {"conv_g2_dil",
       false,
       true,
       {2, 6, 12, 10},
       {2, 2, 3, 3, 3},
       {2, 4, 12, 8},
       {1, 1},
       {1, 2},
       {2, 2},
       {2, 2}},
      // conv2d x[2,6,12,10] w[12,1,3,3] groups 6 (depthwise, multiplier 2), padding 1
      {"conv_dw_x2",
       false,
       false,
       {2, 6, 12, 10},
       {6, 2, 1, 3, 3},
       {2, 12, 12, 10},
       {1, 1},
       {0, 0},
       {1, 1},
       {1, 1}},
      // conv_transpose2d x[b,4,5,6] w[4,3,3,3] stride 2, padding (1,0), output_padding (1,1)
      {"deconv_op_b1",
       true,
       true,
       {1, 4, 5, 6},
       {3, 4, 3, 3},
       {1, 3, 10, 14},
       {2, 2},
       {0, 0},
       {1, 0},
       {0, -1}},
      {"deconv_op_b4",
       true,
       true,
       {4, 4, 5, 6},
       {3, 4, 3, 3},
       {4, 3, 10, 14},
       {2, 2},
       {0, 0},
       {1, 0},
       {0, -1}},
      // conv_transpose2d x[b,4,5,6] w[4,2,3,2] stride (2,3), padding 1, output_padding (0,1),
      // groups 2, dilation (2,1)
      {"deconv_g2_dil_b1",
       true,
       true,
       {1, 4, 5, 6},
       {2, 2, 2, 3, 2},
       {1, 4, 11, 16},
       {2, 3},
       {1, 0},
       {1, 1},
       {1, 0}},
      {"deconv_g2_dil_b4",
       true,
       true,
       {4, 4, 5, 6},
       {2, 2, 2, 3, 2},
       {4, 4, 11, 16},
       {2, 3},
       {1, 0},
       {1, 1},
       {1, 0}},
      // conv_transpose1d x[2,3,7] w[3,5,4] stride 3 padding 1 output_padding 2
      {"deconv1d_op", true, true, {2, 3, 7}, {5, 3, 4}, {2, 5, 22}, {3}, {0}, {1}, {-1}},
      // conv_transpose3d x[1,2,3,4,3] w[2,3,2,3,3] stride (2,1,2) padding (0,1,1) op (1,0,0)
      {"deconv3d_op",
       true,
       true,
       {1, 2, 3, 4, 3},
       {3, 2, 2, 3, 3},
       {1, 3, 7, 4, 5},
       {2, 1, 2},
       {0, 0, 0},
       {0, 1, 1},
       {-1, 1, 1}},
  };
  for (const auto& c : cases) {
    std::vector<Result> results;
    for (bool any : {true, false}) {
      const memory::desc x(c.x, f32, any ? tag::any : plain_data(c.x.size())),
          w(c.w, f32, any ? tag::any : plain_weights(c)),
          y(c.out, f32, any ? tag::any : plain_data(c.out.size()));
      const memory::desc b = c.bias ? memory::desc({c.out[1]}, f32, tag::a) : memory::desc();
      const char* layouts = any ? "any" : "plain";
      if (c.transposed) {
        dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::deconvolution_direct, x, w, b, y,
                                            c.strides, c.dil, c.pb, c.pe);
        probe<DeconvPD>(c, d, layouts, results);
      } else {
        dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::convolution_direct, x, w, b, y,
                                          c.strides, c.dil, c.pb, c.pe);
        probe<ConvPD>(c, d, layouts, results);
      }
    }
    report(c, results);
    std::fflush(stdout);
  }
  return 0;
}
