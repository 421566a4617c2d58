// Shape analysis by running each segment in the TorchScript interpreter: on meta tensors (sizes and
// dtypes without data, PyTorch's shape functions) where every op needed has one, else on
// generated inputs.
#include "partitioning/shape_analysis.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ir/export_sizes.h"
#include "partitioning/partitioning.h"
#include "partitioning/segmentation.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::partitioning {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using Env = std::unordered_map<const Value*, c10::IValue>;

const std::vector<int64_t>& shape_of(const InputProfile& p, Profile profile) {
  return profile == kMin ? p.min : profile == kOpt ? p.opt : p.max;
}

std::optional<int64_t> constant_int(const Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isInt()) return std::nullopt;
  return iv->toInt();
}

// Size of dimension `dim` of `v` when known before running: a graph input or a constant tensor.
std::optional<int64_t> static_size(const Value* v, std::optional<int64_t> dim, const Graph& graph,
                                   const std::vector<InputProfile>& profiles, Profile profile) {
  if (!dim) return std::nullopt;
  std::vector<int64_t> sizes;
  if (auto iv = torch::jit::toIValue(v); iv && iv->isTensor()) {
    sizes = iv->toTensor().sizes().vec();
  } else {
    for (size_t i = 0; i < graph.inputs().size(); ++i)
      if (graph.inputs()[i] == v) sizes = shape_of(profiles[i], profile);
  }
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t d = *dim < 0 ? *dim + rank : *dim;
  if (d < 0 || d >= rank) return std::nullopt;
  return sizes[static_cast<size_t>(d)];
}

// The largest valid index for every index-like use of `input`; nullopt when no use bounds it.
std::optional<int64_t> index_bound(const Value* input, const Graph& graph,
                                   const std::vector<InputProfile>& profiles, Profile profile) {
  std::optional<int64_t> bound;
  auto tighten = [&](std::optional<int64_t> size) {
    if (size) bound = bound ? std::min(*bound, *size) : *size;
  };
  auto unknown = [&] { bound = 0; };  // indexes something whose size we cannot know: zeros
  for (const torch::jit::Use& use : input->uses()) {
    const Node* user = use.user;
    const auto kind = user->kind();
    if ((kind == torch::jit::aten::index_select || kind == torch::jit::aten::gather) &&
        use.offset == 2) {
      const auto size =
          static_size(user->input(0), constant_int(user->input(1)), graph, profiles, profile);
      size ? tighten(size) : unknown();
    } else if (kind == torch::jit::aten::embedding && use.offset == 1) {
      const auto size = static_size(user->input(0), 0, graph, profiles, profile);
      size ? tighten(size) : unknown();
    } else if (kind == torch::jit::prim::ListConstruct) {
      for (const torch::jit::Use& list_use : user->output()->uses()) {
        if (list_use.user->kind() != torch::jit::aten::index || list_use.offset != 1) continue;
        const auto size = static_size(list_use.user->input(0), static_cast<int64_t>(use.offset),
                                      graph, profiles, profile);
        size ? tighten(size) : unknown();
      }
    }
  }
  return bound;
}

ValueDesc describe(const Value* v, const c10::IValue& iv) {
  ValueDesc d;
  d.type = v->type()->str();
  if (iv.isTensor()) {
    d.is_tensor = true;
    d.sizes = iv.toTensor().sizes().vec();
    d.dtype = iv.toTensor().scalar_type();
  }
  return d;
}

c10::IValue lookup(const Env& env, const Value* v) {
  auto it = env.find(v);
  if (it != env.end()) return it->second;
  if (auto iv = torch::jit::toIValue(v)) return *iv;
  KILN_THROW(InternalError, "shape analysis: %", v->debugName(), " was not computed before use");
}

// Why a run on meta tensors stopped (an op without a meta kernel, a size read from data).
struct MetaRunFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The line of an interpreter error that says what failed: its last one (the first is "The
// following operation failed in the TorchScript interpreter.", then a traceback).
std::string last_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

void run_segments(std::vector<Segment>& segments, Env& env, Profile profile, size_t depth,
                  bool meta);

// `graph`'s constants and devices moved to the meta device, so that its ops, given meta inputs,
// compute sizes and dtypes only. 0-d tensors stay where they are: they mix with meta tensors as
// scalars do, and `aten::Int` and friends can still read them. A traced `aten::_convolution`
// (which has no meta kernel: it picks a backend) becomes the `aten::convolution` it computes.
void to_meta(Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* n = *it++;
    for (Block* b : n->blocks()) to_meta(b);
    if (n->kind() == c10::Symbol::fromQualString("aten::_convolution") && n->inputs().size() >= 9) {
      Graph& g = *n->owningGraph();
      Node* conv =
          g.create(c10::Symbol::fromQualString("aten::convolution"), n->inputs().slice(0, 9), 1);
      conv->insertBefore(n)->output()->copyMetadata(n->output());
      n->output()->replaceAllUsesWith(conv->output());
      n->destroy();
      continue;
    }
    if (n->kind() != torch::jit::prim::Constant || !n->hasAttribute(torch::jit::attr::value)) {
      continue;
    }
    const c10::TypePtr& type = n->output()->type();
    if (type->kind() == c10::TypeKind::DeviceObjType) {
      n->s_(torch::jit::attr::value, "meta");
    } else if (n->kindOf(torch::jit::attr::value) == torch::jit::AttributeKind::t) {
      const at::Tensor t = n->t(torch::jit::attr::value);
      if (t.dim() > 0) n->t_(torch::jit::attr::value, t.to(at::kMeta));
    }
  }
}

void run_segment(Segment& s, Env& env, Profile profile, size_t depth, bool meta = false) {
  SegmentShapes& shapes = s.shapes[profile];
  shapes = {};
  for (const Value* v : s.inputs) shapes.inputs.push_back(describe(v, lookup(env, v)));
  if (!s.blocks.empty()) {
    // Both branches are analyzed; the taken one gives the If its outputs.
    Node* node = s.nodes.front();
    const size_t taken = lookup(env, node->input(0)).toBool() ? 0 : 1;
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      try {
        run_segments(s.blocks[b].segments, env, profile, depth + 1, meta);
      } catch (const std::exception&) {
        if (b == taken) throw;
      }
    }
    const Block* branch = node->blocks()[taken];
    for (size_t k = 0; k < node->outputs().size(); ++k)
      env[node->outputs()[k]] = lookup(env, branch->outputs()[k]);
  } else {
    torch::jit::Stack stack;
    for (const Value* v : s.inputs) stack.push_back(lookup(env, v));
    std::shared_ptr<Graph> graph = segment_graph(s);
    if (meta) to_meta(graph->block());
    torch::jit::Code code(graph, "kiln_shape_analysis");
    torch::jit::InterpreterState state(code);
    state.run(stack);
    for (size_t k = 0; k < s.outputs.size(); ++k) env[s.outputs[k]] = stack.at(k);
  }
  for (const Value* v : s.outputs) shapes.outputs.push_back(describe(v, env.at(v)));
}

// The segments whose results an engine segment reads, directly or through other segments (and
// those holding branches, conservatively). The others need no run: shape analysis runs PyTorch
// only where an engine needs the shapes, so an op that fails or even aborts on generated data (a
// solver given a random matrix) cannot stop a compile it takes no part in.
std::vector<bool> needed_segments(const std::vector<Segment>& segments) {
  std::vector<bool> needed(segments.size(), false);
  std::unordered_set<const Value*> read;
  for (size_t i = segments.size(); i-- > 0;) {
    const Segment& s = segments[i];
    bool need = s.target == Target::kEngine || !s.blocks.empty();
    for (const Value* v : s.outputs) need = need || read.count(v) > 0;
    if (!need) continue;
    needed[i] = true;
    read.insert(s.inputs.begin(), s.inputs.end());
  }
  return needed;
}

// The node of engine segment `s` that fails on the values in `env` when its nodes run one at a
// time; null when none fails alone.
const Node* failing_node(const Segment& s, const Env& env) {
  Env local = env;
  for (Node* n : s.nodes) {
    Segment one;
    one.nodes = {n};
    for (Value* v : n->inputs()) {
      if (v->node()->kind() != torch::jit::prim::Constant) one.inputs.push_back(v);
    }
    one.outputs.assign(n->outputs().begin(), n->outputs().end());
    try {
      run_segment(one, local, kOpt, 0);
    } catch (const std::exception&) {
      return n;
    }
  }
  return nullptr;
}

// `node` and every node that reads what it makes, directly or not.
std::vector<const Node*> with_consumers(const Node* node) {
  std::vector<const Node*> out{node};
  std::unordered_set<const Node*> seen{node};
  for (size_t i = 0; i < out.size(); ++i) {
    for (const Value* v : out[i]->outputs()) {
      for (const torch::jit::Use& u : v->uses()) {
        if (u.user->kind() != torch::jit::prim::Return && seen.insert(u.user).second) {
          out.push_back(u.user);
        }
      }
    }
  }
  return out;
}

void run_segments(std::vector<Segment>& segments, Env& env, Profile profile, size_t depth,
                  bool meta) {
  // Inside a branch, a segment may feed what follows the If: every one runs there.
  const std::vector<bool> needed =
      depth == 0 ? needed_segments(segments) : std::vector<bool>(segments.size(), true);
  for (size_t i = 0; i < segments.size(); ++i) {
    Segment& s = segments[i];
    s.has_shapes = false;
    if (!needed[i]) continue;
    if (meta) {
      // Any failure ends the meta run (the caller runs on generated inputs instead).
      try {
        run_segment(s, env, profile, depth, true);
      } catch (const c10::Error& e) {
        throw MetaRunFailed(
            detail::concat("segment ", i, " (", target_name(s.target), "): ", last_line(e.msg())));
      } catch (const std::exception& e) {
        throw MetaRunFailed(
            detail::concat("segment ", i, " (", target_name(s.target), "): ", last_line(e.what())));
      }
      s.has_shapes = true;
      continue;
    }
    std::string failure;
    try {
      run_segment(s, env, profile, depth);
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      failure = e.msg();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (failure.empty()) {
      s.has_shapes = true;
      continue;
    }
    const std::string message =
        detail::concat("shape analysis: ", depth > 0 ? "a branch's " : "", "segment ", i, " (",
                       target_name(s.target), ") failed on the generated inputs: ", failure);
    if (s.target == Target::kEngine) {
      // What fails, and what reads its results (whose shapes would need it run), go to PyTorch.
      const Node* culprit = failing_node(s, env);
      throw EngineSegmentFailed(message,
                                culprit ? with_consumers(culprit)
                                        : std::vector<const Node*>(s.nodes.begin(), s.nodes.end()));
    }
    throw ShapeMismatch(message);
  }
}

// Every segment's shapes at profile `to` become those found at `from` (branches too).
void copy_shapes(std::vector<Segment>& segments, Profile from, Profile to) {
  for (Segment& s : segments) {
    s.shapes[to] = s.shapes[from];
    for (PartitionedBlock& b : s.blocks) copy_shapes(b.segments, from, to);
  }
}

}  // namespace

InputProfile InputProfile::fixed(std::vector<int64_t> shape, c10::ScalarType dtype) {
  return range(shape, shape, shape, dtype);
}

InputProfile InputProfile::range(std::vector<int64_t> min, std::vector<int64_t> opt,
                                 std::vector<int64_t> max, c10::ScalarType dtype) {
  InputProfile p;
  p.min = std::move(min);
  p.opt = std::move(opt);
  p.max = std::move(max);
  p.dtype = dtype;
  return p;
}

InputProfile InputProfile::of_value(c10::IValue value) {
  InputProfile p;
  p.value = std::move(value);
  return p;
}

namespace {

void check_profile_count(const Graph& graph, const std::vector<InputProfile>& profiles) {
  KILN_CHECK(profiles.size() == graph.inputs().size(), InvalidArgument,
             "shape analysis: the graph has ", graph.inputs().size(), " inputs but ",
             profiles.size(), " input profiles were given");
}

// Tensor input `i`'s shape at `profile`, checked against the graph (a tensor input, ranks that
// agree).
const std::vector<int64_t>& checked_shape(const Graph& graph,
                                          const std::vector<InputProfile>& profiles, size_t i,
                                          Profile profile) {
  const InputProfile& p = profiles[i];
  const Value* input = graph.inputs()[i];
  KILN_CHECK(is_tensor(input), InvalidArgument, "shape analysis: input %", input->debugName(),
             " is ", input->type()->annotation_str(), "; give its value in the profile");
  const auto& shape = shape_of(p, profile);
  KILN_CHECK(p.min.size() == shape.size() && p.max.size() == shape.size(), InvalidArgument,
             "shape analysis: input %", input->debugName(), ": min, opt and max ranks differ");
  return shape;
}

// The inputs of a run on meta tensors: sizes and dtypes, no data.
std::vector<c10::IValue> meta_inputs(const Graph& graph, const std::vector<InputProfile>& profiles,
                                     Profile profile) {
  check_profile_count(graph, profiles);
  std::vector<c10::IValue> inputs;
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].value) {
      const c10::IValue& v = *profiles[i].value;
      inputs.push_back(v.isTensor() && v.toTensor().dim() > 0 ? v.toTensor().to(at::kMeta) : v);
      continue;
    }
    const auto& shape = checked_shape(graph, profiles, i, profile);
    inputs.emplace_back(
        at::empty(shape, at::TensorOptions().dtype(profiles[i].dtype).device(at::kMeta)));
  }
  return inputs;
}

}  // namespace

std::vector<c10::IValue> generate_inputs(const Graph& graph,
                                         const std::vector<InputProfile>& profiles, Profile profile,
                                         uint64_t seed, bool zero_integers) {
  check_profile_count(graph, profiles);
  // A generator of its own: compiling leaves the caller's random state alone.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<c10::IValue> inputs;
  for (size_t i = 0; i < profiles.size(); ++i) {
    const InputProfile& p = profiles[i];
    const Value* input = graph.inputs()[i];
    if (p.value) {
      inputs.push_back(*p.value);
      continue;
    }
    const auto& shape = checked_shape(graph, profiles, i, profile);
    const auto options = at::TensorOptions().dtype(p.dtype);
    if (c10::isFloatingType(p.dtype)) {
      inputs.emplace_back(at::randn(shape, gen, options));
    } else if (p.dtype == c10::ScalarType::Bool) {
      inputs.emplace_back(at::randint(0, 2, shape, gen, options));
    } else {
      // Indices within what they index (zeros where that is unknown); other integers from 1
      // to 5, which divide, take remainders and raise powers without failing.
      const auto bound = index_bound(input, graph, profiles, profile);
      inputs.emplace_back(!bound && !zero_integers ? at::randint(1, 6, shape, gen, options)
                          : !bound                 ? at::zeros(shape, options)
                          : *bound > 0             ? at::randint(0, *bound, shape, gen, options)
                                                   : at::zeros(shape, options));
    }
  }
  return inputs;
}

ShapeSource analyze_shapes(PartitionedGraph& partitioned,
                           const std::vector<InputProfile>& profiles) {
  const Graph& graph = *partitioned.graph;
  // `run` for each profile whose inputs differ from those of a profile run before; a profile
  // whose inputs match one already run (every input fixed: all three) copies its shapes.
  const auto for_each_profile = [&](const std::function<void(Profile)>& run) {
    std::vector<Profile> analyzed;
    for (Profile profile : {kMin, kOpt, kMax}) {
      const auto same_inputs = [&](Profile done) {
        return std::all_of(profiles.begin(), profiles.end(), [&](const InputProfile& p) {
          return shape_of(p, done) == shape_of(p, profile);
        });
      };
      const auto done = std::find_if(analyzed.begin(), analyzed.end(), same_inputs);
      if (done != analyzed.end()) {
        copy_shapes(partitioned.segments, *done, profile);
        continue;
      }
      analyzed.push_back(profile);
      run(profile);
    }
  };
  // First without data: PyTorch's shape functions give every size a run would, and nothing can
  // fail on made-up values. Ops without a meta kernel, or sizes read from data (nonzero, item),
  // stop it, and the graph runs on generated inputs instead.
  try {
    for_each_profile([&](Profile profile) {
      const auto inputs = meta_inputs(graph, profiles, profile);
      Env env;
      for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs()[i]] = inputs[i];
      run_segments(partitioned.segments, env, profile, 0, true);
    });
    KILN_LOG(kDebug, "shape analysis: on meta tensors");
    return ShapeSource::kMetaTensors;
  } catch (const MetaRunFailed& f) {
    KILN_LOG(kDebug, "shape analysis on meta tensors stopped at ", f.what(),
             "; it runs on generated inputs");
  }
  for_each_profile([&](Profile profile) {
    const auto run = [&](bool zero_integers) {
      const auto inputs = generate_inputs(graph, profiles, profile, 0, zero_integers);
      Env env;
      for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs()[i]] = inputs[i];
      run_segments(partitioned.segments, env, profile, 0, false);
    };
    // Integers that are not indices are positive first (divisors), zeros if that fails (an
    // index the graph computes from them, which index_bound cannot see); the first failure is
    // the one reported.
    try {
      run(false);
    } catch (const ShapeMismatch&) {
      const std::exception_ptr first = std::current_exception();
      try {
        run(true);
      } catch (const ShapeMismatch&) {
        std::rethrow_exception(first);
      }
    }
  });
  return ShapeSource::kGeneratedInputs;
}

namespace {

bool is_scalar_type_argument(const c10::Argument& arg) {
  c10::TypePtr t = arg.real_type();
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  return t->kind() == c10::TypeKind::ScalarTypeType;
}

bool is_f64_tensor_type(const c10::TypePtr& t) {
  const auto tensor = t->cast<c10::TensorType>();
  return tensor && tensor->scalarType() == c10::ScalarType::Double;
}

// True where `n` may make an f64 tensor from operands that are not f64 (see
// shapes_from_profiles), or holds one already.
bool may_make_f64(const Node* n) {
  for (const Value* v : n->outputs()) {
    if (is_f64_tensor_type(v->type())) return true;
  }
  if (n->kind() == torch::jit::prim::Constant) {
    const auto iv = torch::jit::toIValue(n->output());
    return iv && iv->isTensor() && iv->toTensor().scalar_type() == c10::ScalarType::Double;
  }
  if (n->kind() == torch::jit::prim::NumToTensor) {
    return n->input(0)->type()->kind() != c10::TypeKind::IntType &&
           n->input(0)->type()->kind() != c10::TypeKind::BoolType;
  }
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (!schema) return !n->kind().is_prim();  // an op whose signature we cannot read
  for (size_t i = 0; i < schema->arguments().size() && i < n->inputs().size(); ++i) {
    if (!is_scalar_type_argument(schema->arguments()[i])) continue;
    const Value* dtype = n->input(i);
    // A dtype read off a tensor (prim::dtype) is f64 only where something else made one.
    if (dtype->node()->kind() == torch::jit::prim::dtype) continue;
    const auto iv = torch::jit::toIValue(dtype);
    if (!iv) return true;
    if (iv->isInt() && iv->toInt() == static_cast<int64_t>(c10::ScalarType::Double)) return true;
  }
  return false;
}

bool blocks_hold_engines(const std::vector<PartitionedBlock>& blocks) {
  for (const PartitionedBlock& b : blocks) {
    for (const Segment& s : b.segments) {
      if (s.target == Target::kEngine || blocks_hold_engines(s.blocks)) return true;
    }
  }
  return false;
}

}  // namespace

bool shapes_from_profiles(PartitionedGraph& partitioned,
                          const std::vector<InputProfile>& profiles) {
  const Graph& graph = *partitioned.graph;
  if (profiles.size() != graph.inputs().size()) return false;  // analyze_shapes says why
  if (c10::get_default_dtype() != caffe2::TypeMeta::Make<float>()) return false;
  std::unordered_map<const Value*, size_t> input_index;
  for (size_t i = 0; i < graph.inputs().size(); ++i) input_index[graph.inputs()[i]] = i;
  // The export's symbols at each profile, from the inputs' dims that are those symbols. Recorded
  // sizes count only where every tensor input comes with the export's symbols, that is, where
  // the profiles are the export's own: an input shaped otherwise (a spec given by hand) may not
  // be what the export's static sizes assume.
  const bool exported = std::all_of(profiles.begin(), profiles.end(), [](const InputProfile& p) {
    return p.value || p.dim_symbols.size() == p.opt.size();
  });
  std::array<std::map<std::string, int64_t>, 3> symbols;
  for (Profile profile : {kMin, kOpt, kMax}) {
    for (const InputProfile& p : profiles) {
      const auto& shape = shape_of(p, profile);
      for (size_t d = 0; d < p.dim_symbols.size() && d < shape.size(); ++d) {
        if (!p.dim_symbols[d].empty()) symbols[profile].emplace(p.dim_symbols[d], shape[d]);
      }
    }
  }
  bool recorded = false;
  // Each engine's input descriptions at each profile.
  std::vector<std::pair<Segment*, std::array<std::vector<ValueDesc>, 3>>> engines;
  for (Segment& s : partitioned.segments) {
    if (blocks_hold_engines(s.blocks)) return false;
    if (s.target != Target::kEngine) continue;
    std::array<std::vector<ValueDesc>, 3> inputs;
    for (const Value* v : s.inputs) {
      if (!is_tensor(v)) return false;
      ValueDesc d;
      d.type = v->type()->str();
      d.is_tensor = true;
      const auto it = input_index.find(v);
      if (it != input_index.end()) {
        const InputProfile& p = profiles[it->second];
        if (p.value || p.dtype == c10::ScalarType::Double) return false;
        if (p.min.size() != p.opt.size() || p.max.size() != p.opt.size()) return false;
        d.dtype = p.dtype;
        for (Profile profile : {kMin, kOpt, kMax}) {
          d.sizes = shape_of(p, profile);
          inputs[profile].push_back(d);
        }
        continue;
      }
      // A value PyTorch computes: its sizes as the export recorded them, if it did.
      const auto meta = exported ? ir::export_sizes(v) : std::nullopt;
      if (!meta || meta->dtype == c10::ScalarType::Double ||
          meta->dtype == c10::ScalarType::Undefined) {
        KILN_LOG(kDebug, "shape analysis runs: an engine reads %", v->debugName(),
                 ", which another segment computes", meta ? " in f64" : "");
        return false;
      }
      d.dtype = meta->dtype;
      for (Profile profile : {kMin, kOpt, kMax}) {
        d.sizes.clear();
        for (const std::string& size : meta->sizes) {
          const auto value = ir::evaluate_size(size, symbols[profile]);
          if (!value || *value < 0) {
            KILN_LOG(kDebug, "shape analysis runs: an engine reads %", v->debugName(),
                     ", whose recorded size `", size, "` the inputs' symbols do not give");
            return false;
          }
          d.sizes.push_back(*value);
        }
        inputs[profile].push_back(d);
      }
      recorded = true;
    }
    for (const Node* n : s.nodes) {
      bool f64 = may_make_f64(n);
      for (const Value* v : n->inputs()) {
        f64 = f64 || (v->node()->kind() == torch::jit::prim::Constant && may_make_f64(v->node()));
      }
      if (f64) {
        KILN_LOG(kDebug, "shape analysis runs: `", overload_name(n),
                 "` in an engine may make f64, whose results stitching casts back");
        return false;
      }
    }
    engines.emplace_back(&s, std::move(inputs));
  }
  for (auto& [s, inputs] : engines) {
    for (Profile profile : {kMin, kOpt, kMax}) {
      s->shapes[profile] = {};
      s->shapes[profile].inputs = std::move(inputs[profile]);
    }
    s->has_shapes = true;
  }
  KILN_LOG(kDebug, "shape analysis: the engines' input shapes from the profiles",
           recorded ? " and the export's recorded sizes" : "", "; nothing runs");
  return true;
}

std::shared_ptr<Graph> segment_graph(const Segment& s,
                                     std::unordered_map<const Node*, Node*>* origin) {
  auto g = std::make_shared<Graph>();
  std::unordered_map<const Value*, Value*> map;
  for (Value* v : s.inputs) map[v] = g->addInput()->copyMetadata(v);
  std::function<Value*(Value*)> value_of = [&](Value* v) -> Value* {
    auto it = map.find(v);
    if (it != map.end()) return it->second;
    KILN_CHECK(v->node()->kind() == torch::jit::prim::Constant, InternalError, "segment_graph: %",
               v->debugName(), " is neither an input nor made in its segment");
    Node* c = g->insertNode(g->createClone(v->node(), value_of));
    return map[v] = c->output();
  };
  for (Node* n : s.nodes) {
    Node* c = g->insertNode(g->createClone(n, value_of));
    for (size_t k = 0; k < n->outputs().size(); ++k) map[n->outputs()[k]] = c->outputs()[k];
    if (origin) (*origin)[c] = n;
  }
  for (Value* v : s.outputs) g->registerOutput(map.at(v));
  return g;
}

}  // namespace kiln::partitioning
