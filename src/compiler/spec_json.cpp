// The compile spec as JSON (spec_json.h).
#include "compiler/spec_json.h"

#include <nlohmann/json.hpp>

#include "util/errors.h"

namespace kiln::compiler {
using json = nlohmann::json;

std::string spec_to_json(const CompileSpec& spec) {
  json inputs = json::array();
  for (const Input& in : spec.inputs) {
    inputs.push_back({{"min", in.min_shape},
                      {"opt", in.opt_shape},
                      {"max", in.max_shape},
                      {"dtype", dtype_name(in.dtype)},
                      {"channels_last", in.format == TensorFormat::kChannelsLast},
                      {"dim_symbols", in.dim_symbols}});
  }
  json precisions = json::array();
  for (DType d : spec.enabled_precisions) precisions.push_back(dtype_name(d));
  json j = {{"version", 1},
            {"inputs", inputs},
            {"device", spec.device.str()},
            {"enabled_precisions", precisions},
            {"min_block_size", spec.min_block_size},
            {"torch_executed_ops", spec.torch_executed_ops},
            {"torch_executed_modules", spec.torch_executed_modules},
            {"require_full_compilation", spec.require_full_compilation},
            {"backend_priority", spec.backend_priority},
            {"backend_support_map", spec.backend_support_map},
            {"enable_resource_partitioning", spec.enable_resource_partitioning},
            {"cpu_memory_budget", spec.cpu_memory_budget},
            {"truncate_long_and_double", spec.truncate_long_and_double},
            {"assume_dynamic_shape_support", spec.assume_dynamic_shape_support},
            {"workspace_size", spec.workspace_size},
            {"disable_tf32", spec.disable_tf32},
            {"exact_gelu", spec.exact_gelu},
            {"switches", spec.switches},
            {"refittable", spec.refittable},
            {"engine_cache", spec.engine_cache},
            {"engine_cache_dir", spec.engine_cache_dir},
            {"engine_cache_size", spec.engine_cache_size},
            {"print_after_all", spec.print_after_all},
            {"debug", spec.debug}};
  return j.dump();
}

CompileSpec spec_from_json(const std::string& text, const std::string& where) {
  CompileSpec spec;
  try {
    const json j = json::parse(text);
    KILN_CHECK(j.at("version").get<int>() == 1, CorruptInput, where, ": spec version ",
               j.at("version").dump(), " (this kiln reads 1)");
    for (const json& in : j.at("inputs")) {
      Input i(in.at("min").get<std::vector<int64_t>>(), in.at("opt").get<std::vector<int64_t>>(),
              in.at("max").get<std::vector<int64_t>>(),
              parse_dtype(in.at("dtype").get<std::string>()));
      if (in.at("channels_last").get<bool>()) i.format = TensorFormat::kChannelsLast;
      if (in.contains("dim_symbols")) {  // (specs saved before symbols have none)
        i.dim_symbols = in.at("dim_symbols").get<std::vector<std::string>>();
      }
      spec.inputs.push_back(std::move(i));
    }
    spec.device = parse_device(j.at("device").get<std::string>());
    spec.enabled_precisions.clear();
    for (const json& d : j.at("enabled_precisions")) {
      spec.enabled_precisions.push_back(parse_dtype(d.get<std::string>()));
    }
    spec.min_block_size = j.at("min_block_size").get<size_t>();
    spec.torch_executed_ops = j.at("torch_executed_ops").get<std::vector<std::string>>();
    spec.torch_executed_modules = j.at("torch_executed_modules").get<std::vector<std::string>>();
    spec.require_full_compilation = j.at("require_full_compilation").get<bool>();
    // Not in the specs of kilns before multi-backend and resource partitioning.
    spec.backend_priority = j.value("backend_priority", std::vector<std::string>{});
    spec.backend_support_map =
        j.value("backend_support_map", std::map<std::string, std::vector<std::string>>{});
    spec.enable_resource_partitioning = j.value("enable_resource_partitioning", false);
    spec.cpu_memory_budget = j.value("cpu_memory_budget", uint64_t{0});
    spec.truncate_long_and_double = j.at("truncate_long_and_double").get<bool>();
    // Not in the specs of kilns before converters declared dynamic-shape support.
    spec.assume_dynamic_shape_support = j.value("assume_dynamic_shape_support", false);
    spec.workspace_size = j.at("workspace_size").get<size_t>();
    spec.disable_tf32 = j.at("disable_tf32").get<bool>();
    spec.exact_gelu = j.at("exact_gelu").get<bool>();
    spec.switches = j.at("switches").get<std::vector<std::string>>();
    spec.refittable = j.at("refittable").get<bool>();
    spec.engine_cache = j.at("engine_cache").get<bool>();
    spec.engine_cache_dir = j.at("engine_cache_dir").get<std::string>();
    spec.engine_cache_size = j.at("engine_cache_size").get<uint64_t>();
    spec.print_after_all = j.at("print_after_all").get<bool>();
    spec.debug = j.at("debug").get<bool>();
  } catch (const json::exception& e) {
    KILN_THROW(CorruptInput, where, ": not a compile spec (", e.what(), ")");
  } catch (const InvalidArgument& e) {
    KILN_THROW(CorruptInput, where, ": ", e.message());
  }
  return spec;
}

}  // namespace kiln::compiler
