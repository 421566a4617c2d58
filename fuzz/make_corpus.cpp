// Writes the seed corpora of plan_fuzz and engine_state_fuzz: small built plans that between them
// use most layer kinds. Usage: kiln_fuzz_make_corpus OUT_DIR (writes OUT_DIR/{plan,engine_state}).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "engine/builder.h"
#include "engine/plan.h"

namespace {

using namespace kiln::engine;

Weights ramp(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(volume(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return Weights::from_floats(shape, v);
}

struct Seed {
  std::string name;
  std::function<void(Network&)> build;
};

std::vector<Seed> seeds() {
  const Profile batch{{1, 4}, {2, 4}, {4, 4}};
  return {
      {"elementwise",
       [=](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {kDynamic, 4}, batch);
         auto w = n.add_constant("w", ramp({4}));
         auto m = n.add("mul", ElementwiseParams{BinaryOp::kMul}, {x, w});
         n.mark_output(n.add("relu", ActivationParams{ActivationKind::kRelu}, {m}), "y");
         n.mark_output(n.add("neg", UnaryParams{UnaryOp::kNeg}, {x}), "z");
         // A fused layer reading x gathered along its last dim (in aligned runs of 2).
         const std::vector<int32_t> order = {2, 3, 0, 1};
         std::vector<uint8_t> bytes(order.size() * sizeof(int32_t));
         std::memcpy(bytes.data(), order.data(), bytes.size());
         auto idx = n.add_constant("idx", Weights::from_bytes(DataType::kI32, {4}, bytes));
         FusedElementwiseParams f;
         f.program = {0, static_cast<int64_t>(BinaryOp::kMul), 0, 1};
         f.constants = {0, 0};
         f.gathers = {0, 1, 2};
         n.mark_output(n.add("gathered", f, {x, w, idx}), "g");
       }},
      {"conv_pool",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {1, 2, 6, 6});
         auto w = n.add_constant("w", ramp({3, 2, 3, 3}));
         auto b = n.add_constant("b", ramp({3}));
         ConvolutionParams cp{{1, 1}, {1, 1}, {1, 1}, {1, 1}};
         cp.post.has_bias = true;
         cp.post.activation = ActivationKind::kRelu;
         auto c = n.add("conv", cp, {x, w, b});
         PoolingParams p;
         p.kernel = {2, 2};
         p.strides = {2, 2};
         p.padding_begin = p.padding_end = {0, 0};
         p.dilations = {1, 1};
         n.mark_output(n.add("pool", p, {c}), "y");
       }},
      {"conv_pool_channels_last",  // the layout pass's layers: NHWC data, [O, kh, kw, C] weights
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {1, 6, 6, 2});
         auto w = n.add_constant("w", ramp({4, 3, 3, 1}));
         ConvolutionParams cp{{2, 2}, {1, 1}, {1, 0}, {1, 1}, 2};
         cp.channels_last = true;
         auto c = n.add("conv", cp, {x, w});
         PoolingParams p;
         p.kind = PoolingKind::kAverage;
         p.adaptive = true;
         p.output_size = {1, 1};
         p.channels_last = true;
         n.mark_output(n.add("pool", p, {c}), "y");
       }},
      {"matmul_softmax",
       [=](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {kDynamic, 4}, batch);
         auto w = n.add_constant("w", ramp({4, 3}));
         auto m = n.add("mm", MatMulParams{}, {x, w});
         n.mark_output(n.add("softmax", SoftmaxParams{-1, false}, {m}), "y");
         // A masked, causal softmax (decomposed attention's): rows of [batch, 3] keep the
         // columns `keep` holds up to the row's index in the batch.
         auto keep = n.add_input("keep", DataType::kBool, {3});
         n.mark_output(n.add("masked", SoftmaxParams{-1, false, true}, {m, keep}), "z");
       }},
      {"reduce_norm",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {2, 3, 4});
         auto s = n.add_constant("s", ramp({4}));
         auto b = n.add_constant("b", ramp({4}));
         NormalizationParams p;
         auto ln = n.add("ln", p, {x, s, b});
         NormalizationParams rms;
         rms.kind = NormalizationKind::kRms;
         auto r = n.add("rms", rms, {ln, s});
         n.mark_output(n.add("sum", ReduceParams{ReduceOp::kSum, {1}, false}, {r}), "y");
       }},
      {"shuffle_slice_concat",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {2, 3, 4});
         ShuffleParams sh;
         sh.first_perm = {0, 2, 1};
         sh.has_reshape = true;
         sh.reshape = {2, -1};
         auto t = n.add("shuffle", sh, {x});
         SliceParams sl{{1}, {1}, {kSliceEnd}, {2}};
         auto s = n.add("slice", sl, {t});
         n.mark_output(n.add("cat", ConcatParams{1, false}, {s, s}), "y");
       }},
      {"dense_block_concats",  // in-place concats (concat_in_place): placed copies, views
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {2, 3, 4});
         auto a = n.add("a", ActivationParams{ActivationKind::kRelu}, {x});
         auto b = n.add("b", UnaryParams{UnaryOp::kNeg}, {x});
         auto ab = n.add("ab", ConcatParams{2, false}, {a, b});
         n.mark_output(n.add("p", UnaryParams{UnaryOp::kNeg}, {ab}), "p");
         auto c = n.add("c", UnaryParams{UnaryOp::kAbs}, {x});
         auto abc = n.add("abc", ConcatParams{2, false}, {a, b, c});
         n.mark_output(n.add("q", ActivationParams{ActivationKind::kRelu}, {abc}), "q");
         auto d = n.add("d", ElementwiseParams{BinaryOp::kAdd}, {a, b});
         auto all = n.add("all", ConcatParams{2, false}, {a, b, c, d});
         n.mark_output(n.add("y", UnaryParams{UnaryOp::kNeg}, {all}), "y");
       }},
      {"gather_cast_cumsum",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {5, 3});
         auto idx = n.add_input("i", DataType::kI64, {4});
         auto g = n.add("gather", GatherParams{GatherMode::kDefault, 0}, {x, idx});
         auto c = n.add("cast", CastParams{DataType::kI32}, {g});
         n.mark_output(n.add("cumsum", ScanParams{ScanOp::kSum, 1, false, false}, {c}), "y");
       }},
      {"pad_topk_argmax",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {2, 5});
         PadParams p;
         p.begin = {0, 1};
         p.end = {0, 2};
         auto padded = n.add("pad", p, {x});
         TopKParams k;
         k.k = 2;
         const TensorId v = n.add("topk", k, {padded});
         n.mark_output(v, "values");
         n.mark_output(n.add("argmax", ArgMaxParams{}, {x}), "index");
       }},
      {"shape_fill_where",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {kDynamic, 3}, Profile{{1, 3}, {2, 3}, {4, 3}});
         auto shape = n.add("shape", ShapeParams{}, {x});
         FillParams f;
         f.dtype = DataType::kF32;
         f.value = 2;
         auto filled = n.add("fill", f, {shape});
         auto cond = n.add("gt", ElementwiseParams{BinaryOp::kGt}, {x, filled});
         n.mark_output(n.add("where", SelectParams{}, {cond, x, filled}), "y");
       }},
      {"resize_attention",
       [](Network& n) {
         auto x = n.add_input("x", DataType::kF32, {1, 1, 2, 2});
         ResizeParams r;
         r.output_size = {4, 4};
         n.mark_output(n.add("resize", r, {x}), "y");
         auto q = n.add_input("q", DataType::kF32, {1, 3, 4});
         n.mark_output(n.add("attention", AttentionParams{}, {q, q, q}), "a");
       }},
  };
}

void write(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln_fuzz_make_corpus OUT_DIR\n";
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out / "plan");
  std::filesystem::create_directories(out / "engine_state");
  int status = 0;
  for (const Seed& seed : seeds()) {
    Network net;
    try {
      seed.build(net);
      const Plan plan = build(net, BuilderConfig{});
      const auto bytes = serialize_plan(plan);
      write(out / "plan" / (seed.name + ".plan"), bytes);
      // engine_state layout (see engine_state_fuzz.cpp): flags, device, name, inputs, outputs,
      // plan.
      std::vector<uint8_t> state{0};
      auto put = [&](const std::string& s) {
        state.insert(state.end(), s.begin(), s.end());
        state.push_back(0);
      };
      std::string ins, outs;
      for (TensorId id : plan.network.inputs())
        ins += (ins.empty() ? "" : "\n") + plan.network.tensor(id).name;
      for (TensorId id : plan.network.outputs())
        outs += (outs.empty() ? "" : "\n") + plan.network.tensor(id).name;
      put("cpu");
      put("engine_" + seed.name);
      put(ins);
      put(outs);
      state.insert(state.end(), bytes.begin(), bytes.end());
      write(out / "engine_state" / (seed.name + ".state"), state);
      std::cout << seed.name << ": " << bytes.size() << " bytes\n";
    } catch (const std::exception& e) {
      std::cerr << seed.name << ": " << e.what() << "\n";
      status = 1;
    }
  }
  return status;
}
