// html_escape (common/html.h): markupsafe's five entities, nothing else touched.
#include "common/html.h"

#include <gtest/gtest.h>

namespace rlrun {
namespace {

TEST(HtmlEscape, TheFiveCharactersBecomeMarkupsafesEntities) {
  EXPECT_EQ(html_escape(R"(<a href="x">Tom & Jerry's</a>)"),
            "&lt;a href=&#34;x&#34;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
}

TEST(HtmlEscape, EverythingElseIsCopiedAsIs) {
  EXPECT_EQ(html_escape(""), "");
  EXPECT_EQ(html_escape("caf\xc3\xa9 \xff 42"), "caf\xc3\xa9 \xff 42") << "UTF-8 and invalid bytes alike";
  EXPECT_EQ(html_escape("&amp;"), "&amp;amp;") << "already escaped text is escaped again, as markupsafe does";
}

}  // namespace
}  // namespace rlrun
