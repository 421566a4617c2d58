// The default registry's declarations: every converter has decided whether it is right for
// dynamic dims, and with_dynamic_shapes() changes nothing else of an entry.
#include "conversion/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kiln::conversion {
namespace {

TEST(Registry, EveryConverterDecidesOnDynamicShapes) {
  size_t declared = 0;
  std::set<std::string> without;
  for (const auto& [key, entry] : default_registry().converter_entries()) {
    if (entry->supports_dynamic_shapes) {
      ++declared;
    } else {
      without.insert(key);
    }
  }
  // empty_like's validator refuses every node: it converts nothing, so it declares nothing.
  EXPECT_EQ(without, (std::set<std::string>{"aten::empty_like"}));
  // A converter added without the declaration lands in `without` and fails this: it declares
  // supports_dynamic_shapes (with_dynamic_shapes) when it is right for dynamic dims or refuses
  // them with Unsupported, or joins the list above with its reason.
  EXPECT_GT(declared, 300u);
}

TEST(Registry, WithDynamicShapesKeepsTheRestOfTheEntry) {
  const ConverterEntry e = with_dynamic_shapes(
      {{"aten::relu"}, [](ConversionContext&, const torch::jit::Node*) {}, {}, 3, true});
  EXPECT_TRUE(e.supports_dynamic_shapes);
  EXPECT_EQ(e.schemas, std::vector<std::string>{"aten::relu"});
  EXPECT_EQ(e.priority, 3);
  EXPECT_TRUE(e.requires_output_allocator);
  EXPECT_TRUE(e.convert != nullptr);
  EXPECT_FALSE(ConverterEntry{}.supports_dynamic_shapes);  // undeclared: refused on dynamic dims
}

}  // namespace
}  // namespace kiln::conversion
