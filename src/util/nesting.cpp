// Bracket depth of parser input (see nesting.h).
#include "util/nesting.h"

#include "util/errors.h"

namespace kiln {

void check_nesting_depth(std::string_view text, const std::string& source_name, size_t max_depth) {
  size_t depth = 0, line = 1, column = 0;
  char quote = 0;  // the open string's quote character, or 0 outside strings
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
    }
    if (quote != 0) {
      if (c == '\\') {
        ++i;  // the escaped character cannot close the string (a newline there is rare enough)
        ++column;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      KILN_CHECK(++depth <= max_depth, CorruptInput, source_name, ":", line, ":", column,
                 ": brackets nest deeper than ", max_depth, " levels");
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;  // the parser reports unbalanced brackets itself
    }
  }
}

}  // namespace kiln
