// html.h - text made safe to put inside HTML or XML (SVG): the one escape every component uses
// (the Jinja interpreter's |escape and autoescape, the run report's pages and charts).
#pragma once

#include <string>
#include <string_view>

namespace rlrun {

// markupsafe.escape: & < > " ' become entities, so the text can go in an element or an attribute
// value (single or double quoted); everything else, invalid UTF-8 included, is copied as is.
std::string html_escape(std::string_view s);

}  // namespace rlrun
