// `rlrun report`'s page in a real browser: Debian's headless Chromium opens the page written for
// the hand-written run of report_test_run.h, takes a screenshot, and the PNG (decoded here with
// zlib) must show a drawn page: many colours, a good share of non-white pixels, and the charts'
// first palette colour (bars and legend swatches) in solid blocks. An empty page, screenshotted
// the same way, must fail the same check, so the check can tell.
//
// Skipped when `chromium` is not in PATH (scripts/install-deps.sh --test installs it);
// `ctest -L browser` runs it alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "tests/common/prometheus_process.h"  // find_in_path
#include "tests/orchestrator/cli/report_test_run.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

using rlrun::testing::CliRun;
using rlrun::testing::read_all;
using rlrun::testing::run_rlrun;
using rlrun::testing::run_shell;
using rlrun::testing::TempDir;

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint32_t> pixels;  // 0xRRGGBB, row by row
};

uint32_t big_endian(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return static_cast<uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

// An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes); "" or what is wrong.
std::string decode_png(const std::string& png, Image* image) {
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return "not a PNG file";
  std::string idat;
  uint32_t channels = 0;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t length = big_endian(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + length > png.size()) return "truncated chunk " + type;
    if (type == "IHDR") {
      image->width = big_endian(png, at + 8);
      image->height = big_endian(png, at + 12);
      const int depth = png[at + 16], color = png[at + 17], interlace = png[at + 20];
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        return str("unsupported PNG: depth ", depth, ", colour type ", color, ", interlace ", interlace);
      }
      channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, length);
    }
    at += 12 + length;
  }
  if (channels == 0 || idat.empty()) return "no IHDR or IDAT chunk";
  const size_t stride = 1 + size_t(image->width) * channels;  // a filter byte, then the row
  std::vector<uint8_t> raw(stride * image->height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    return "IDAT does not inflate to the image size";
  }
  // Undo each row's filter in place (PNG spec 9.2), with the previous row already undone.
  for (uint32_t y = 0; y < image->height; ++y) {
    uint8_t* row = &raw[y * stride + 1];
    const uint8_t* up = y > 0 ? &raw[(y - 1) * stride + 1] : nullptr;
    const uint8_t filter = raw[y * stride];
    for (size_t i = 0; i < stride - 1; ++i) {
      const int a = i >= channels ? row[i - channels] : 0, b = up ? up[i] : 0,
                c = up && i >= channels ? up[i - channels] : 0;
      switch (filter) {
        case 0: break;
        case 1: row[i] = uint8_t(row[i] + a); break;
        case 2: row[i] = uint8_t(row[i] + b); break;
        case 3: row[i] = uint8_t(row[i] + (a + b) / 2); break;
        case 4: row[i] = uint8_t(row[i] + paeth(a, b, c)); break;
        default: return str("bad filter type ", int(filter), " in row ", y);
      }
    }
    for (uint32_t x = 0; x < image->width; ++x) {
      const uint8_t* p = row + x * channels;
      image->pixels.push_back((uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2]);
    }
  }
  return "";
}

struct Screenshot {
  std::string error;  // "" when the PNG decoded
  Image image;
  double seconds = 0;
};

// Opens `html_path` in headless Chromium (--no-sandbox: the tests may run as root) and decodes
// the screenshot it takes.
Screenshot screenshot(const TempDir& dir, const std::string& chromium, const std::string& html_path,
                      const std::string& png_path) {
  Screenshot s;
  const auto start = std::chrono::steady_clock::now();
  const CliRun r = run_shell(dir, str("timeout 60 '", chromium, "' --headless --no-sandbox --disable-gpu ",
                                      "--hide-scrollbars --user-data-dir='", dir.path(), "/chromium-profile' ",
                                      "--screenshot='", png_path, "' --window-size=1200,2000 'file://", html_path, "'"));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.exit_code != 0) {
    s.error = str("chromium exited ", r.exit_code, ": ", r.err);
    return s;
  }
  s.error = decode_png(read_all(png_path), &s.image);
  return s;
}

// What a drawn page shows and a blank one does not.
struct PageLook {
  size_t colours = 0;
  double non_white = 0;      // fraction of pixels
  size_t palette_blue = 0;   // pixels exactly #1f77b4: bars, legend swatches
};

PageLook look(const Image& image) {
  PageLook l;
  std::set<uint32_t> colours;
  size_t non_white = 0;
  for (uint32_t p : image.pixels) {
    colours.insert(p);
    non_white += p != 0xffffff;
    l.palette_blue += p == 0x1f77b4;
  }
  l.colours = colours.size();
  l.non_white = image.pixels.empty() ? 0 : double(non_white) / double(image.pixels.size());
  return l;
}

bool looks_drawn(const PageLook& l) { return l.colours >= 64 && l.non_white >= 0.03 && l.palette_blue >= 1000; }

TEST(ReportBrowser, ChromiumRendersThePageWithItsCharts) {
  const std::string chromium = testing::find_in_path("chromium");
  if (chromium.empty()) {
    GTEST_SKIP() << "the `chromium` binary is not in PATH; install it with scripts/install-deps.sh --test "
                    "(Debian package `chromium`)";
  }
  TempDir dir;
  testing::write_report_test_run(dir);
  const CliRun r = run_rlrun(dir, str("report '", dir.path(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const Screenshot page = screenshot(dir, chromium, dir.path() + "/report.html", dir.path() + "/report.png");
  ASSERT_EQ(page.error, "");
  EXPECT_EQ(page.image.width, 1200u);
  EXPECT_EQ(page.image.height, 2000u);
  const PageLook drawn = look(page.image);
  std::printf("[report in chromium] %.1f s, %zu colours, %.1f%% non-white, %zu palette-blue pixels\n", page.seconds,
              drawn.colours, 100 * drawn.non_white, drawn.palette_blue);
  EXPECT_TRUE(looks_drawn(drawn)) << drawn.colours << " colours, " << drawn.non_white << " non-white, "
                                  << drawn.palette_blue << " palette-blue pixels";

  dir.write("blank.html", "<!DOCTYPE html><html><body></body></html>\n");
  const Screenshot blank = screenshot(dir, chromium, dir.path() + "/blank.html", dir.path() + "/blank.png");
  ASSERT_EQ(blank.error, "");
  EXPECT_FALSE(looks_drawn(look(blank.image))) << "the check cannot tell a blank page";
}

}  // namespace
}  // namespace rlrun
