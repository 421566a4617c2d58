// The builder: checks the configuration, takes the rules of the target's backend, runs the
// passes (passes/pipeline.cpp) and plans memory at the opt shapes for the report.
#include "engine/builder.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "engine/cuda/backend.h"
#include "engine/passes/pass.h"
#include "engine/runtime.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::engine {

int BuildReport::changes(const std::string& name) const {
  int n = 0;
  for (const PassRecord& p : passes) {
    if (p.name == name) n += p.changes;
  }
  return n;
}

std::vector<std::string> BuildReport::lines() const {
  std::vector<std::string> all;
  for (const PassRecord& p : passes) all.insert(all.end(), p.lines.begin(), p.lines.end());
  return all;
}

std::string BuildReport::to_string() const {
  std::ostringstream os;
  os << "layers: " << layers_before << " -> " << layers_after << " (" << shuffles
     << " shuffles that move data)\n";
  if (precision.low != DataType::kF32) os << precision.summary() << "\n";
  if (layout.convolutions > 0) {
    os << "layout: " << layout.convolutions << " convolutions channels-last, "
       << layout.layers_moved << " other layers follow, " << layout.transposes
       << " transposes of activations\n";
  }
  os << "passes:";
  for (const PassRecord& p : passes) os << " " << p.name << " " << p.changes;
  os << "\n";
  for (const std::string& line : lines()) os << "fused: " << line << "\n";
  if (kernel_choices > 0)
    os << "kernel choices made at the profile points: " << kernel_choices << "\n";
  os << "activation memory: arena " << arena_bytes << " bytes vs " << activation_bytes
     << " bytes unshared";
  if (activation_bytes) os << " (" << (100.0 * arena_bytes / activation_bytes) << "%)";
  os << "\n";
  return os.str();
}

void apply_switch(BuilderConfig& config, const std::string& name_value) {
  const size_t eq = name_value.find('=');
  const std::string name = name_value.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : name_value.substr(eq + 1);
  const auto on_off = [&](bool* field) {
    KILN_CHECK(value == "on" || value == "off", InvalidArgument, "switch `", name_value,
               "`: expected ", name, "=on or ", name, "=off");
    *field = value == "on";
  };
  if (name == "conv_layout") {
    KILN_CHECK(value == "auto" || value == "channels_first" || value == "channels_last",
               InvalidArgument, "switch `", name_value,
               "`: expected conv_layout=auto, channels_first or channels_last");
    config.conv_layout = value == "auto"             ? ConvLayout::kAuto
                         : value == "channels_first" ? ConvLayout::kChannelsFirst
                                                     : ConvLayout::kChannelsLast;
  } else if (name == "squeeze_excitation") {
    bool on = false;
    on_off(&on);
    config.squeeze_excitation = on;
  } else if (name == "excitation_projection") {
    on_off(&config.excitation_projection);
  } else if (name == "cast_into_shuffle") {
    on_off(&config.cast_into_shuffle);
  } else if (name == "concat_in_place") {
    on_off(&config.concat_in_place);
  } else if (name == "decompose_attention") {
    on_off(&config.decompose_attention);
  } else if (name == "attention_mask_biases") {
    on_off(&config.attention_mask_biases);
  } else if (name == "choose_at_build") {
    on_off(&config.choose_at_build);
  } else if (name == "cuda_arch") {
    // Builds for that compute capability without asking a device (plans for a GPU elsewhere:
    // an engine refuses to run on another one).
    KILN_CHECK(value.size() >= 2 && value.size() <= 3 &&
                   value.find_first_not_of("0123456789") == std::string::npos && value[0] != '0',
               InvalidArgument, "switch `", name_value,
               "`: expected cuda_arch=NN, a compute capability such as 90");
  } else if (name == "cuda_pointwise" || name == "cuda_depthwise") {
    // Read by the CUDA kernels from the plan's switches (cuda::KernelOptions).
    const char* other = name == "cuda_pointwise" ? "cudnn" : "strip";
    KILN_CHECK(value == "auto" || value == other, InvalidArgument, "switch `", name_value,
               "`: expected ", name, "=auto or ", name, "=", other);
  } else if (name == "cuda_grouped") {  // read by the CUDA kernels too
    KILN_CHECK(value == "auto" || value == "cudnn" || value == "kernel", InvalidArgument,
               "switch `", name_value, "`: expected cuda_grouped=auto, cudnn or kernel");
  } else if (name == "gemm_skinny") {  // read by the CUDA kernels too
    KILN_CHECK(value == "off" || value == "on" || value == "only", InvalidArgument, "switch `",
               name_value, "`: expected gemm_skinny=off, on or only");
  } else if (name == "attention_cudnn") {  // read by the CUDA kernels too
    KILN_CHECK(value == "auto" || value == "on" || value == "off", InvalidArgument, "switch `",
               name_value, "`: expected attention_cudnn=auto, on or off");
  } else if (name == "gemm_fold" || name == "gemm_timing" || name == "gemm_split_k" ||
             name == "attention_key_split" || name == "cuda_codegen" ||
             name == "reuse_algorithms" || name == "first_call_gemm" || name == "repeat_tuning" ||
             name == "programmatic_launch") {
    bool on = true;  // read by the CUDA kernels from the plan's switches (cuda::KernelOptions)
    on_off(&on);
  } else {
    KILN_THROW(InvalidArgument, "unknown switch `", name_value,
               "` (switches: conv_layout, squeeze_excitation, excitation_projection, "
               "cast_into_shuffle, concat_in_place, decompose_attention, attention_mask_biases, "
               "cuda_pointwise, "
               "cuda_depthwise, cuda_grouped, gemm_fold, gemm_timing, gemm_split_k, gemm_skinny, "
               "attention_key_split, attention_cudnn, cuda_codegen, reuse_algorithms, "
               "first_call_gemm, repeat_tuning, programmatic_launch, choose_at_build, cuda_arch)");
  }
  config.switches.push_back(name_value);
}

namespace {

EngineTarget target_of(const BuilderConfig& config) {
  EngineTarget target;
  if (config.device != "cpu") {
    KILN_CHECK(config.device.rfind("cuda", 0) == 0, InvalidArgument, "builder: device `",
               config.device, "` is not cpu, cuda or cuda:N");
    KILN_CHECK(cuda::built(), Unsupported, "builder: device `", config.device,
               "`: this build of kiln has no CUDA backend (CMake found no CUDA toolkit)");
    target.device = "cuda";
    target.device_index = cuda::parse_device(config.device);
    target.compute_capability = 0;
    for (const std::string& s : config.switches) {
      if (s.rfind("cuda_arch=", 0) == 0) target.compute_capability = std::stoi(s.substr(10));
    }
    if (target.compute_capability == 0) {
      target.compute_capability = cuda::compute_capability(target.device_index);
    }
  }
  target.switches = config.switches;
  return target;
}

BackendRules rules_of(const EngineTarget& target) {
  return target.device == "cuda" ? cuda_backend_rules(target) : cpu_backend_rules();
}

// The builder's passes over `net` for `target`.
void run_builder_passes(Network& net, const BuilderConfig& config, const EngineTarget& target,
                        const BackendRules& rules, BuildReport& r) {
  PassContext context{config, target, rules, r};
  if (config.refittable) {
    for (const auto& [name, w] : net.weights()) context.refit_weights.insert(name);
  }
  run_passes(net, builder_pipeline(), context, std::cerr);
}

// cuda (BuilderConfig::choose_at_build): the built engine run once at each profile point on
// random data, on the device the plan is for, so that its kernels choose now; their choices go to
// the plan. A run that fails leaves them to the first calls (a warning, not a failed build: the
// plan is right either way).
void choose_at_profile_points(Plan& plan) {
  EngineTarget& target = plan.target;
  if (cuda::device_count() <= target.device_index ||
      cuda::compute_capability(target.device_index) != target.compute_capability) {
    return;  // built for another GPU (cuda_arch=NN)
  }
  try {
    auto engine = std::make_shared<const Engine>(plan.network, target);
    ExecutionContext ctx(engine);
    ctx.run_profile_points();
    target.choices = engine->kernel_choices();
    target.choice_environment =
        target.choices.empty() ? "" : cuda::choice_environment(target.device_index);
  } catch (const Error& e) {
    target.choices.clear();
    target.choice_environment.clear();
    KILN_LOG(kWarning, "builder: running the engine at its profile points failed (", e.what(),
             "); its kernels choose at their first calls there instead");
  }
}

std::vector<SourceWeight> source_weights(const Network& net) {
  std::vector<SourceWeight> out;
  for (const std::string& name : constant_slots(net)) {
    const Weights& w = net.weight(name);
    out.push_back({name, w.dtype, w.shape});
  }
  return out;
}

}  // namespace

Plan build(const Network& network, const BuilderConfig& config, BuildReport* report) {
  EngineTarget target = target_of(config);
  KILN_CHECK(std::find(config.enabled_precisions.begin(), config.enabled_precisions.end(),
                       DataType::kF32) != config.enabled_precisions.end(),
             InvalidArgument, "builder: enabled precisions must include f32");
  for (DataType t : config.enabled_precisions) {
    KILN_CHECK(is_floating(t), InvalidArgument, "builder: precision ", dtype_name(t),
               " is not a floating type");
  }
  KILN_CHECK(!network.outputs().empty(), InvalidArgument, "builder: the network has no outputs");

  BuildReport r;
  Plan plan{network, target};
  Network& net = plan.network;
  r.layers_before = static_cast<int>(net.layers().size());
  const BackendRules rules = rules_of(target);
  run_builder_passes(net, config, target, rules, r);
  plan.source.key = network_key(network);
  plan.source.refittable = config.refittable;
  if (config.refittable) {
    plan.source.weights = source_weights(network);
    plan.source.built_key = network_key(net);
    plan.source.slots = constant_slots(net);
  }
  r.layers_after = static_cast<int>(net.layers().size());
  r.shuffles = count_moving_shuffles(net.layers());
  if (rules.check_supported) rules.check_supported(net);
  if (rules.generate_kernels) {
    const size_t before = plan.target.kernels.size();
    r.generated_layers = rules.generate_kernels(net, plan.target);
    r.generated_kernels = static_cast<int>(plan.target.kernels.size() - before);
  }
  if (config.choose_at_build && plan.target.device == "cuda") {
    choose_at_profile_points(plan);
    r.kernel_choices = static_cast<int>(plan.target.choices.size());
  }

  // Memory at the opt shapes (planning needs no device: a CPU engine of the same network).
  auto engine = std::make_shared<const Engine>(net, EngineTarget{});
  ExecutionContext ctx(engine);
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    ctx.set_input_shape(i, net.profile(net.inputs()[i]).opt);
  }
  ctx.output_shape(0);
  r.arena_bytes = ctx.arena_bytes();
  r.activation_bytes = ctx.activation_bytes();
  KILN_CHECK(r.arena_bytes <= config.workspace_bytes || config.workspace_bytes == 0,
             InvalidArgument, "builder: activations need ", r.arena_bytes,
             " bytes at the opt shapes, over the workspace limit of ", config.workspace_bytes);
  KILN_LOG(kInfo, "built engine: ", r.to_string());
  if (report) *report = r;
  return plan;
}

void refit(Plan& plan, const Network& source, const BuilderConfig& config,
           const std::string& what) {
  check_refit_source(plan, source, what);
  Network net = source;
  BuilderConfig quiet = config;
  quiet.print_after_all = false;
  quiet.verify_passes = false;  // the build verified these rewrites of this network
  BuildReport r;
  run_builder_passes(net, quiet, plan.target, rules_of(plan.target), r);
  const std::string built = network_key(net);
  KILN_CHECK(built == plan.source.built_key, InvalidArgument, what,
             ": the builder rewrites the network with the new weights otherwise than it did at the "
             "build (key ",
             built, ", the engine's ", plan.source.built_key,
             "): the build settings differ, or a rewrite read a weight's values; compile again");
  const std::vector<std::string> slots = constant_slots(net);
  KILN_CHECK(slots.size() == plan.source.slots.size(), InternalError, what, ": ", slots.size(),
             " weights after the passes, the engine has ", plan.source.slots.size());
  Network& target = plan.network;
  for (size_t k = 0; k < slots.size(); ++k) {
    const std::string& name = plan.source.slots[k];
    if (!target.weights().count(name)) continue;  // not read by the built plan
    const Weights& have = target.weight(name);
    const Weights& give = net.weight(slots[k]);
    KILN_CHECK(have.dtype == give.dtype && have.shape == give.shape, InternalError, what,
               ": weight `", name, "` after the passes does not match the engine's");
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    const std::string& name = plan.source.slots[k];
    if (target.weights().count(name)) target.add_weight(name, net.weight(slots[k]));
  }
}

}  // namespace kiln::engine
