// _kiln: the compiler's C++ API for the Python package (python/kiln). Modules cross as
// torch._C.ScriptModule objects, cast through the class torch registers with the pybind11
// internals this module shares (no serialization, no link to libtorch_python; bytes of
// torch.jit.save are taken too), exported programs as torch.export.save bytes, and specs as JSON.
// kiln's errors become the package's exception classes, with the C++ message.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "kiln/kiln.h"
#include "kiln/logging.h"
#include "util/errors.h"

namespace py = pybind11;

namespace {

torch::jit::Module load_module(const py::bytes& data) {
  std::istringstream in(std::string(data), std::ios::binary);
  try {
    return torch::jit::load(in);
  } catch (const c10::Error& e) {
    KILN_THROW(InvalidArgument, "not a TorchScript module: ", e.what_without_backtrace());
  }
}

// A module from Python: a torch._C.ScriptModule (a ScriptModule's `_c`), taken as the object it
// is through the type torch registers with the pybind11 internals it shares with this module,
// or the bytes of torch.jit.save.
torch::jit::Module to_module(const py::object& m) {
  if (py::isinstance<py::bytes>(m)) return load_module(m.cast<py::bytes>());
  try {
    return m.cast<torch::jit::Module>();
  } catch (const py::cast_error&) {
    KILN_THROW(InvalidArgument, "expected a torch._C.ScriptModule or torch.jit.save bytes, got ",
               std::string(py::str(py::type::of(m))));
  }
}

// Whether torch's class for modules is among the types this module's pybind11 internals know
// (torch's own headers: the internals are shared). Without it, modules cross as bytes.
bool shares_torch_types() {
  return py::detail::get_type_info(typeid(torch::jit::Module)) != nullptr;
}

// A module to Python as a torch._C.ScriptModule (torch.jit._recursive.wrap_cpp_module makes it a
// ScriptModule), without serializing it; as torch.jit.save bytes where the type is not shared.
py::object to_python(const torch::jit::Module& module) {
  if (shares_torch_types()) return py::cast(module);
  std::ostringstream out(std::ios::binary);
  module.save(out);
  return py::bytes(out.str());
}

std::vector<int64_t> ints(const nlohmann::json& j, const char* what) {
  KILN_CHECK(j.is_array(), InvalidArgument, what, ": expected a list of ints, got ", j.dump());
  std::vector<int64_t> v;
  for (const auto& e : j) {
    KILN_CHECK(e.is_number_integer(), InvalidArgument, what, ": expected ints, got ", j.dump());
    v.push_back(e.get<int64_t>());
  }
  return v;
}

std::vector<std::string> strings(const nlohmann::json& j, const char* what) {
  std::vector<std::string> v;
  for (const auto& e : j) {
    KILN_CHECK(e.is_string(), InvalidArgument, what, ": expected strings, got ", j.dump());
    v.push_back(e.get<std::string>());
  }
  return v;
}

bool flag(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return false;
  KILN_CHECK(j[key].is_boolean(), InvalidArgument, key, ": expected True or False, got ",
             j[key].dump());
  return j[key].get<bool>();
}

size_t count(const nlohmann::json& j, const char* key, size_t fallback, size_t min) {
  if (!j.contains(key)) return fallback;
  KILN_CHECK(j[key].is_number_unsigned() && j[key].get<size_t>() >= min, InvalidArgument, key,
             ": expected an integer of at least ", min, ", got ", j[key].dump());
  return j[key].get<size_t>();
}

// The spec as kiln/_compile.py writes it (names as in kiln::CompileSpec).
kiln::CompileSpec parse_spec(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  kiln::CompileSpec spec;
  for (const auto& in : j.at("inputs")) {
    kiln::Input input(ints(in.at("min_shape"), "min_shape"), ints(in.at("opt_shape"), "opt_shape"),
                      ints(in.at("max_shape"), "max_shape"),
                      kiln::parse_dtype(in.at("dtype").get<std::string>()));
    if (in.value("format", "contiguous") == "channels_last") {
      input.format = kiln::TensorFormat::kChannelsLast;
    }
    spec.inputs.push_back(std::move(input));
  }
  spec.device = kiln::parse_device(j.value("device", "cpu"));
  spec.enabled_precisions.clear();
  for (const auto& p : strings(j.at("enabled_precisions"), "enabled_precisions")) {
    spec.enabled_precisions.push_back(kiln::parse_dtype(p));
  }
  spec.min_block_size = count(j, "min_block_size", spec.min_block_size, 1);
  spec.torch_executed_ops =
      strings(j.value("torch_executed_ops", nlohmann::json::array()), "torch_executed_ops");
  spec.torch_executed_modules =
      strings(j.value("torch_executed_modules", nlohmann::json::array()), "torch_executed_modules");
  spec.require_full_compilation = flag(j, "require_full_compilation");
  spec.backend_priority =
      strings(j.value("backend_priority", nlohmann::json::array()), "backend_priority");
  if (j.contains("backend_support_map")) {
    const nlohmann::json& map = j["backend_support_map"];
    KILN_CHECK(map.is_object(), InvalidArgument,
               "backend_support_map: expected a dict of backend to op names, got ", map.dump());
    for (const auto& [backend, ops] : map.items()) {
      KILN_CHECK(ops.is_array(), InvalidArgument, "backend_support_map[", backend,
                 "]: expected a list of op names, got ", ops.dump());
      spec.backend_support_map[backend] = strings(ops, "backend_support_map");
    }
  }
  spec.enable_resource_partitioning = flag(j, "enable_resource_partitioning");
  spec.cpu_memory_budget = count(j, "cpu_memory_budget", 0, 0);
  spec.truncate_long_and_double = flag(j, "truncate_long_and_double");
  spec.assume_dynamic_shape_support = flag(j, "assume_dynamic_shape_support");
  spec.workspace_size = count(j, "workspace_size", spec.workspace_size, 0);
  spec.disable_tf32 = flag(j, "disable_tf32");
  spec.exact_gelu = flag(j, "exact_gelu");
  spec.switches = strings(j.value("switches", nlohmann::json::array()), "switches");
  spec.refittable = flag(j, "refittable");
  spec.engine_cache = flag(j, "engine_cache");
  if (j.contains("engine_cache_dir")) {
    KILN_CHECK(j["engine_cache_dir"].is_string(), InvalidArgument,
               "engine_cache_dir: expected a path, got ", j["engine_cache_dir"].dump());
    spec.engine_cache_dir = j["engine_cache_dir"].get<std::string>();
    spec.engine_cache = true;
  }
  spec.engine_cache_size = count(j, "engine_cache_size", spec.engine_cache_size, 1);
  spec.print_after_all = flag(j, "print_after_all");
  spec.debug = flag(j, "debug");
  return spec;
}

using Progress = std::function<void(const std::string&, const std::string&)>;

py::tuple compile_module(const torch::jit::Module& input, kiln::CompileSpec spec,
                         const Progress& progress) {
  if (progress) {
    spec.progress = [&progress](kiln::Phase phase, const std::string& detail) {
      py::gil_scoped_acquire gil;
      progress(kiln::phase_name(phase), detail);
    };
  }
  kiln::CompileReport report;
  torch::jit::Module out;
  {
    py::gil_scoped_release release;
    out = kiln::compile(input, spec, &report);
  }
  return py::make_tuple(to_python(out), report.to_json(), report.summary());
}

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's compiler (C++); use the kiln package, not this module";

  py::object base = py::module_::import("builtins").attr("RuntimeError");
  py::object value_error = py::module_::import("builtins").attr("ValueError");
  static py::exception<kiln::Error> error(m, "Error", base.ptr());
  // InvalidArgument is a ValueError too, as Python code expects of bad arguments.
  py::object invalid_bases = py::make_tuple(error, value_error);
  static py::object invalid = py::reinterpret_steal<py::object>(
      PyErr_NewException("_kiln.InvalidArgument", invalid_bases.ptr(), nullptr));
  m.attr("InvalidArgument") = invalid;
  static py::exception<kiln::Unsupported> unsupported(m, "Unsupported", error.ptr());
  static py::exception<kiln::CorruptInput> corrupt(m, "CorruptInput", error.ptr());
  static py::exception<kiln::ShapeMismatch> shape(m, "ShapeMismatch", error.ptr());
  static py::exception<kiln::DeviceError> device(m, "DeviceError", error.ptr());
  static py::exception<kiln::InternalError> internal(m, "InternalError", error.ptr());
  // Module-local: torch shares pybind11 internals, and its own c10::Errors must stay its own.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::InvalidArgument& e) {
      PyErr_SetString(invalid.ptr(), e.message().c_str());
    } catch (const kiln::Unsupported& e) {
      PyErr_SetString(unsupported.ptr(), e.message().c_str());
    } catch (const kiln::CorruptInput& e) {
      PyErr_SetString(corrupt.ptr(), e.message().c_str());
    } catch (const kiln::ShapeMismatch& e) {
      PyErr_SetString(shape.ptr(), e.message().c_str());
    } catch (const kiln::DeviceError& e) {
      PyErr_SetString(device.ptr(), e.message().c_str());
    } catch (const kiln::Error& e) {
      PyErr_SetString(internal.ptr(), e.message().c_str());
    } catch (const c10::Error& e) {
      PyErr_SetString(error.ptr(), e.what_without_backtrace());
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(invalid.ptr(), (std::string("compile spec: ") + e.what()).c_str());
    }
  });

  m.attr("BUILD_MEMORY_MULTIPLIER") = kiln::kBuildMemoryMultiplier;
  m.def("register_atomic_subgraph", &kiln::register_atomic_subgraph,
        "an op chain partitioning never splits (kiln.register_atomic_subgraph)");
  m.def("shares_torch_types", &shares_torch_types,
        "whether modules can cross as torch._C.ScriptModule objects (else as bytes)");
  m.def(
      "compile",
      [](const py::object& module, const std::string& spec_json, const Progress& progress) {
        return compile_module(to_module(module), parse_spec(spec_json), progress);
      },
      py::arg("module"), py::arg("spec"), py::arg("progress") = nullptr,
      "compiles a torch._C.ScriptModule (or torch.jit.save bytes); returns (torch._C.ScriptModule, "
      "report JSON, summary)");
  m.def(
      "compile_exported",
      [](const py::bytes& program, const std::string& spec_json, const Progress& progress) {
        kiln::CompileSpec spec = parse_spec(spec_json);
        const kiln::ExportedModule exported =
            kiln::load_exported_program_bytes(std::string(program), "the ExportedProgram");
        if (spec.inputs.empty()) spec.inputs = exported.specs();
        return compile_module(exported.module, spec, progress);
      },
      py::arg("program"), py::arg("spec"), py::arg("progress") = nullptr,
      "compiles an ExportedProgram (torch.export.save bytes) through the ATen frontend; inputs "
      "default to the export's shapes; returns (torch._C.ScriptModule, report JSON, summary)");
  m.def(
      "refit",
      [](const py::object& compiled, const py::object& module, bool exported) {
        const torch::jit::Module c = to_module(compiled);
        const torch::jit::Module weights =
            exported ? kiln::load_exported_program_bytes(module.cast<std::string>(),
                                                         "the ExportedProgram")
                           .module
                     : to_module(module);
        kiln::CompileReport report;
        torch::jit::Module out;
        {
          py::gil_scoped_release release;
          out = kiln::refit(c, weights, &report);
        }
        return py::make_tuple(to_python(out), report.to_json(), report.summary());
      },
      py::arg("compiled"), py::arg("module"), py::arg("exported"),
      "a compiled module's engines with the weights of `module` (a torch._C.ScriptModule, or "
      "torch.export.save bytes when `exported`); returns (torch._C.ScriptModule, report JSON, "
      "summary)");
  m.def(
      "op_coverage",
      [](const py::object& module, const std::string& spec_json, bool exported) {
        kiln::CompileSpec spec = parse_spec(spec_json);
        if (!exported) return kiln::op_coverage_json(to_module(module), spec);
        const kiln::ExportedModule program =
            kiln::load_exported_program_bytes(module.cast<std::string>(), "the ExportedProgram");
        if (spec.inputs.empty()) spec.inputs = program.specs();
        return kiln::op_coverage_json(program.module, spec);
      },
      py::arg("module"), py::arg("spec"), py::arg("exported"),
      "the coverage report (JSON) of a module (torch._C.ScriptModule, or torch.export.save bytes "
      "when `exported`) partitioned with the spec's settings and nothing built");
  m.def(
      "check_method_op_support",
      [](const py::object& module, const std::string& method) {
        std::string report;
        const bool ok = kiln::check_method_op_support(to_module(module), method, &report);
        return py::make_tuple(ok, report);
      },
      py::arg("module"), py::arg("method") = "forward");
  m.def("set_log_level", [](const std::string& level) {
    const auto parsed = kiln::parse_log_level(level);
    KILN_CHECK(parsed.has_value(), InvalidArgument, "log level `", level,
               "` is not error, warning, info, debug or graph");
    kiln::set_log_level(*parsed);
  });
  m.def("log_level", [] { return std::string(kiln::log_level_name(kiln::log_level())); });
  // Messages go to `sink(level name, message)` (Python's logging); None restores stderr.
  m.def("set_log_sink",
        [](const std::function<void(const std::string&, const std::string&)>& sink) {
          if (!sink) {
            kiln::set_log_sink({});
            return;
          }
          kiln::set_log_sink([sink](kiln::LogLevel level, const std::string& message) {
            if (!Py_IsInitialized()) return;
            py::gil_scoped_acquire gil;
            try {
              sink(kiln::log_level_name(level), message);
            } catch (const py::error_already_set&) {
              // a failing log handler must not throw into the compiler
            }
          });
        });
}
