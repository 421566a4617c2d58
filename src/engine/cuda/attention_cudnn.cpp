// cuDNN's fused attention through the frontend's graph API (attention_cudnn.h): a graph per shape
// with q, k, v and o read and written in place through their strides, the mask as an additive
// bias, and no softmax statistics (inference). The only file that includes the frontend; CMake
// defines KILN_CUDNN_FRONTEND where it found its headers, and without them cuDNN takes no shape.
#include "engine/cuda/attention_cudnn.h"

#include <cstring>
#include <exception>
#include <unordered_map>

#if defined(KILN_CUDNN_FRONTEND)
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace kiln::engine::cuda {

std::vector<int64_t> SdpaShape::key() const {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale));
  return {static_cast<int64_t>(dtype),
          B,
          H,
          kv_heads,
          L,
          S,
          E,
          q.batch,
          q.head,
          q.row,
          k.batch,
          k.head,
          k.row,
          v.batch,
          v.head,
          v.row,
          o.batch,
          o.head,
          o.row,
          causal,
          scale_bits,
          bias,
          bias ? static_cast<int64_t>(bias_dtype) : 0,
          bias ? bias_batch : 0,
          bias ? bias_heads : 0,
          bias ? bias_strides.batch : 0,
          bias ? bias_strides.head : 0,
          bias ? bias_strides.row : 0};
}

#if defined(KILN_CUDNN_FRONTEND)

namespace fe = cudnn_frontend;

class SdpaGraph {
 public:
  fe::graph::Graph graph;
  int64_t workspace = 0;
  bool bias = false;
};

namespace {

// The graph's tensors, as the variant pack names them.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kBias };

fe::DataType_t fe_type(DataType t) {
  return t == DataType::kF16    ? fe::DataType_t::HALF
         : t == DataType::kBF16 ? fe::DataType_t::BFLOAT16
                                : fe::DataType_t::FLOAT;
}

// Whether a frontend step failed; if so, `why` says which and the frontend's reason.
bool failed(const fe::error_t& status, const char* step, std::string* why) {
  if (status.is_good()) return false;
  *why = std::string(step) + ": " + status.err_msg;
  return true;
}

}  // namespace

bool cudnn_attention_built() {
  return true;
}

std::shared_ptr<const SdpaGraph> build_sdpa_graph(const SdpaShape& s, void* cudnn,
                                                  std::string* why) {
  if (s.dtype != DataType::kF16 && s.dtype != DataType::kBF16) {
    *why = std::string("cuDNN's fused attention takes f16 and bf16, not ") + dtype_name(s.dtype);
    return nullptr;
  }
  // The frontend reports failures as statuses, but may throw from deeper down (a library it
  // loads, an allocation): either way cuDNN does not take the shape.
  try {
    auto built = std::make_shared<SdpaGraph>();
    fe::graph::Graph& graph = built->graph;
    const fe::DataType_t io = fe_type(s.dtype);
    graph.set_io_data_type(io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const auto tensor = [&](int64_t uid, const char* name, int64_t batch, int64_t heads,
                            int64_t rows, int64_t cols, const SdpaStrides& st,
                            fe::DataType_t type) {
      return graph.tensor(fe::graph::Tensor_attributes()
                              .set_uid(uid)
                              .set_name(name)
                              .set_dim({batch, heads, rows, cols})
                              .set_stride({st.batch, st.head, st.row, 1})
                              .set_data_type(type));
    };
    const auto q = tensor(kQ, "q", s.B, s.H, s.L, s.E, s.q, io);
    const auto k = tensor(kK, "k", s.B, s.kv_heads, s.S, s.E, s.k, io);
    const auto v = tensor(kV, "v", s.B, s.kv_heads, s.S, s.E, s.v, io);
    auto attributes = fe::graph::SDPA_attributes()
                          .set_name("attention")
                          .set_generate_stats(false)
                          .set_attn_scale(s.scale)
                          .set_causal_mask(s.causal);
    if (s.bias) {
      attributes.set_bias(tensor(kBias, "bias", s.bias_batch, s.bias_heads, s.L, s.S,
                                 s.bias_strides, fe_type(s.bias_dtype)));
    }
    const auto outputs = graph.sdpa(q, k, v, std::move(attributes));
    outputs[0]
        ->set_output(true)
        .set_uid(kO)
        .set_dim({s.B, s.H, s.L, s.E})
        .set_stride({s.o.batch, s.o.head, s.o.row, 1})
        .set_data_type(io);
    const auto handle = static_cast<cudnnHandle_t>(cudnn);
    if (failed(graph.validate(), "validate", why) ||
        failed(graph.build_operation_graph(handle), "build_operation_graph", why) ||
        failed(graph.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", why) ||
        failed(graph.check_support(handle), "check_support", why) ||
        failed(graph.build_plans(handle), "build_plans", why) ||
        failed(graph.get_workspace_size(built->workspace), "get_workspace_size", why)) {
      return nullptr;
    }
    built->bias = s.bias;
    return built;
  } catch (const std::exception& e) {
    *why = std::string("the cuDNN frontend threw: ") + e.what();
    return nullptr;
  }
}

size_t sdpa_workspace_bytes(const SdpaGraph& graph) {
  return static_cast<size_t>(graph.workspace);
}

bool run_sdpa_graph(const SdpaGraph& graph, void* cudnn, cudaStream_t stream, const void* q,
                    const void* k, const void* v, const void* bias, void* o, void* workspace,
                    std::string* error) {
  const auto handle = static_cast<cudnnHandle_t>(cudnn);
  // The handle stays bound to its context's stream (Resources::cudnn) once this returns.
  cudaStream_t bound = nullptr;
  cudnnStatus_t status = cudnnGetStream(handle, &bound);
  if (status == CUDNN_STATUS_SUCCESS && bound != stream) status = cudnnSetStream(handle, stream);
  if (status != CUDNN_STATUS_SUCCESS) {
    *error = std::string("binding the cuDNN handle to the stream: ") + cudnnGetErrorString(status);
    return false;
  }
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, o}};
  if (graph.bias) pack.emplace(kBias, const_cast<void*>(bias));
  fe::error_t result;
  try {
    result = graph.graph.execute(handle, pack, workspace);
  } catch (const std::exception& e) {
    result = fe::error_t(fe::error_code_t::GRAPH_EXECUTION_FAILED, e.what());
  }
  if (bound != stream) cudnnSetStream(handle, bound);
  if (result.is_bad()) {
    *error = "cuDNN's fused attention failed: " + result.err_msg;
    return false;
  }
  return true;
}

#else  // no cuDNN frontend: cuDNN takes no shape

class SdpaGraph {};

bool cudnn_attention_built() {
  return false;
}

std::shared_ptr<const SdpaGraph> build_sdpa_graph(const SdpaShape&, void*, std::string* why) {
  *why = "this build of kiln has no cuDNN frontend (CMake found no cudnn_frontend.h)";
  return nullptr;
}

size_t sdpa_workspace_bytes(const SdpaGraph&) {
  return 0;
}

bool run_sdpa_graph(const SdpaGraph&, void*, cudaStream_t, const void*, const void*, const void*,
                    const void*, void*, void*, std::string* error) {
  *error = "this build of kiln has no cuDNN frontend";
  return false;
}

#endif

}  // namespace kiln::engine::cuda
