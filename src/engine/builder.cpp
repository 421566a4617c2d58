// The builder: checks the configuration, takes the rules of the target's backend, runs the
// passes (passes/pipeline.cpp) and plans memory at the opt shapes for the report.
#include "engine/builder.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "engine/cuda/backend.h"
#include "engine/passes/pass.h"
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
  } else if (name == "cuda_pointwise" || name == "cuda_depthwise") {
    // Read by the CUDA kernels from the plan's switches (cuda::KernelOptions).
    const char* other = name == "cuda_pointwise" ? "cudnn" : "strip";
    KILN_CHECK(value == "auto" || value == other, InvalidArgument, "switch `", name_value,
               "`: expected ", name, "=auto or ", name, "=", other);
  } else if (name == "gemm_fold" || name == "gemm_timing" || name == "cuda_codegen") {
    bool on = true;  // read by the CUDA kernels from the plan's switches (cuda::KernelOptions)
    on_off(&on);
  } else {
    KILN_THROW(InvalidArgument, "unknown switch `", name_value,
               "` (switches: conv_layout, squeeze_excitation, excitation_projection, "
               "cast_into_shuffle, cuda_pointwise, cuda_depthwise, gemm_fold, gemm_timing, "
               "cuda_codegen)");
  }
  config.switches.push_back(name_value);
}

Plan build(const Network& network, const BuilderConfig& config, BuildReport* report) {
  EngineTarget target;
  if (config.device != "cpu") {
    KILN_CHECK(config.device.rfind("cuda", 0) == 0, InvalidArgument, "builder: device `",
               config.device, "` is not cpu, cuda or cuda:N");
    KILN_CHECK(cuda::built(), Unsupported, "builder: device `", config.device,
               "`: this build of kiln has no CUDA backend (CMake found no CUDA toolkit)");
    target.device = "cuda";
    target.device_index = cuda::parse_device(config.device);
    target.compute_capability = cuda::compute_capability(target.device_index);
  }
  KILN_CHECK(std::find(config.enabled_precisions.begin(), config.enabled_precisions.end(),
                       DataType::kF32) != config.enabled_precisions.end(),
             InvalidArgument, "builder: enabled precisions must include f32");
  for (DataType t : config.enabled_precisions) {
    KILN_CHECK(is_floating(t), InvalidArgument, "builder: precision ", dtype_name(t),
               " is not a floating type");
  }
  KILN_CHECK(!network.outputs().empty(), InvalidArgument, "builder: the network has no outputs");
  target.switches = config.switches;

  BuildReport r;
  Plan plan{network, target};
  Network& net = plan.network;
  r.layers_before = static_cast<int>(net.layers().size());
  const BackendRules rules =
      target.device == "cuda" ? cuda_backend_rules(target) : cpu_backend_rules();
  PassContext context{config, target, rules, r};
  if (config.refittable) {
    for (const auto& [name, w] : net.weights()) context.refit_weights.insert(name);
  }
  run_passes(net, builder_pipeline(), context, std::cerr);
  r.layers_after = static_cast<int>(net.layers().size());
  r.shuffles = count_moving_shuffles(net.layers());
  if (rules.check_supported) rules.check_supported(net);
  if (rules.generate_kernels) {
    const size_t before = plan.target.kernels.size();
    r.generated_layers = rules.generate_kernels(net, plan.target);
    r.generated_kernels = static_cast<int>(plan.target.kernels.size() - before);
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

}  // namespace kiln::engine
