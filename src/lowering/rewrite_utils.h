// Small helpers the lowering passes share: constant queries and node replacement.
#pragma once

#include <torch/script.h>

#include <optional>

namespace kiln::lowering {

// The value of a prim::Constant (or nullopt when `v` is not a constant).
std::optional<c10::IValue> constant_value(const torch::jit::Value* v);
bool is_constant_bool(const torch::jit::Value* v, bool expected);
bool is_constant_int(const torch::jit::Value* v, int64_t expected);
bool is_constant_none(const torch::jit::Value* v);
// A constant int or float as a double (nullopt for anything else).
std::optional<double> constant_number(const torch::jit::Value* v);
// Scalar 1 (int or float): the alpha/beta of add/addmm that makes them plain adds.
bool is_constant_one(const torch::jit::Value* v);

// A torch dim (negative from the end) in [0, rank), or nullopt when it is out of range.
std::optional<int64_t> normalized_dim(int64_t d, int64_t rank);

// The rank of a tensor value when its type or constant value tells it.
std::optional<int64_t> known_rank(const torch::jit::Value* v);
std::optional<c10::ScalarType> known_dtype(const torch::jit::Value* v);
std::optional<c10::Device> known_device(const torch::jit::Value* v);

// Makes `to` carry the fallback mark of `from` (see lower.h), so rewrites keep module fallback.
void inherit_fallback_mark(const torch::jit::Node* from, torch::jit::Node* to);

// Replaces every use of `node`'s only output with `replacement` and destroys `node`.
void replace_and_destroy(torch::jit::Node* node, torch::jit::Value* replacement);

}  // namespace kiln::lowering
