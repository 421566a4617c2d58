// kiln_run_module MODULE INPUTS OUTPUT: a fresh process that loads a compiled module (with the
// kiln runtime linked), runs forward on pickled inputs (a tuple of tensors) and pickles the output.
#include <torch/script.h>
#include <torch/serialize.h>

#include <fstream>
#include <iostream>
#include <iterator>

namespace {

std::vector<char> read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: kiln_run_module MODULE INPUTS OUTPUT\n";
    return 2;
  }
  try {
    torch::jit::Module module = torch::jit::load(argv[1]);
    const auto inputs = torch::pickle_load(read_file(argv[2])).toTupleRef().elements().vec();
    const torch::jit::IValue output = module.forward(inputs);
    const std::vector<char> bytes = torch::pickle_save(output);
    std::ofstream(argv[3], std::ios::binary).write(bytes.data(), bytes.size());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kiln_run_module: " << e.what() << '\n';
    return 1;
  }
}
