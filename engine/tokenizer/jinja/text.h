// jinja/text.h - Python's str methods on UTF-8 strings (Python counts and cases code points).
// Invalid UTF-8 bytes pass through as single "code points" that no case mapping changes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlrun::engine::jinja {

std::vector<std::string_view> code_points(std::string_view s);  // one view per code point
size_t code_point_count(std::string_view s);
void append_utf8(int32_t cp, std::string* out);
bool py_isspace(int32_t cp);

// str.strip/lstrip/rstrip: `chars` unset strips whitespace, else any of its code points.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit): sep unset splits on whitespace runs and drops empty pieces.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first code point upper, the rest lower
std::string py_title(std::string_view s);       // str.title(): words are runs of cased letters
std::string jinja_title(std::string_view s);    // the |title filter: words split at [-\s({\[<]
std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

}  // namespace rlrun::engine::jinja
