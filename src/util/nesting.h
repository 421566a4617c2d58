// A bound on how deeply brackets nest in text kiln hands to a recursive-descent parser.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

// Torch's IR and schema parsers recurse once per bracket level with no limit of their own, so
// ten thousand `(` in a 20 KB file overflow the stack. Real graphs nest a few levels (tuple types,
// list attributes); 256 leaves room for any of them.
constexpr size_t kMaxNestingDepth = 256;

// Throws CorruptInput `<source>:<line>:<col>: brackets nest deeper than <max> levels` at the first
// `(`, `[` or `{` past `max_depth` open ones. Brackets inside "..." or '...' strings (with
// backslash escapes) do not count.
void check_nesting_depth(std::string_view text, const std::string& source_name,
                         size_t max_depth = kMaxNestingDepth);

}  // namespace kiln
