// Golden test: rlrun's chat template interpreter against HF transformers' apply_chat_template.
//
// build/models/chat-templates/golden.json (or $RLRUN_MODELS_DIR/chat-templates/) is written by
// scripts/fetch-test-models.sh (scripts/chat_template_golden.py): real models' templates, each
// rendered by HF on the same cases. Every template x case must render byte-identical, or fail
// where HF raised, with HF's message (raise_exception's, or Python's own: "'NoneType' object is not
// iterable"). Prints a table of template x case -> identical / DIFF. Fails, saying how to make it, when the
// golden is missing (RLRUN_SKIP_MODEL_TESTS=1 skips).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"

namespace rlrun::engine {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

fs::path golden_path() {
  const char* env = std::getenv("RLRUN_MODELS_DIR");
  fs::path models = env != nullptr && *env ? fs::path(env) : fs::path(RLRUN_SOURCE_DIR) / "build/models";
  return models / "chat-templates/golden.json";
}

// "2024-09-05T14:30:07" -> broken-down time with weekday and day of year filled in.
std::tm parse_now(const std::string& iso) {
  std::tm tm{};
  std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
              &tm.tm_sec);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

// The first line where two texts differ, for the failure message.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto around = [&](const std::string& s) { return ordered_json(s.substr(i < 40 ? 0 : i - 40, 100)).dump(); };
  return "at byte " + std::to_string(i) + ":\n    HF:    " + around(want) + "\n    rlrun: " + around(got);
}

TEST(ChatTemplateGolden, EveryTemplateAndCaseRendersAsHF) {
  const fs::path path = golden_path();
  if (!fs::exists(path)) {
    // The README's test command fetches it: a skip here would hide a broken fetch.
    const char* skip = std::getenv("RLRUN_SKIP_MODEL_TESTS");
    if (skip != nullptr && std::string(skip) == "1") GTEST_SKIP() << path << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << path << " is missing: run scripts/setup-python-ref.sh then scripts/fetch-test-models.sh "
           << "(it renders the golden with HF transformers), or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  std::ifstream in(path, std::ios::binary);
  const ordered_json golden = ordered_json::parse(in);
  const std::tm now = parse_now(golden["now"].get<std::string>());

  // A template HF cannot compile either (an unknown filter) fails every case, with jinja2's message.
  std::map<std::string, Result<ChatTemplate>> templates;
  for (const auto& [name, t] : golden["templates"].items()) {
    templates.emplace(name, ChatTemplate::parse(t["source"].get<std::string>()));
  }

  // template -> outcome per case, in golden order: '=' identical, 'r' both raise alike, 'X' differs
  std::map<std::string, std::string> table;
  std::vector<std::string> case_names;
  int identical = 0, total = 0;
  for (const ordered_json& c : golden["cases"]) {
    const std::string name = c["template"], case_name = c["case"];
    ++total;
    if (std::find(case_names.begin(), case_names.end(), case_name) == case_names.end()) {
      case_names.push_back(case_name);
    }
    char outcome = 'X';
    const Result<ChatTemplate>& tmpl = templates.at(name);
    ChatRenderInput input;
    input.messages = c["messages"];
    input.add_generation_prompt = c["add_generation_prompt"];
    input.tools = c["tools"];
    input.documents = c["documents"];
    input.extra = c.value("kwargs", ordered_json::object());
    for (const auto& [k, v] : golden["templates"][name]["special_tokens"].items()) {
      if (v.is_string()) input.special_tokens[k] = v.get<std::string>();
    }
    input.now = [now] { return now; };
    Result<std::string> got = tmpl.ok() ? tmpl->render(input) : Result<std::string>(tmpl.status());
    if (c.contains("error")) {
      const std::string type = c["error"]["type"], message = c["error"]["message"];
      if (got.ok()) {
        ADD_FAILURE() << name << " x " << case_name << ": HF raised " << type << " (" << message
                      << ") but rlrun rendered:\n" << *got;
      } else if (got.status().message().find(message) == std::string::npos) {
        ADD_FAILURE() << name << " x " << case_name << ": HF raised `" << message << "`, rlrun `"
                      << got.status().message() << "`";
      } else {
        outcome = 'r';
      }
    } else if (!got.ok()) {
      ADD_FAILURE() << name << " x " << case_name << ": " << got.status().message();
    } else if (*got != c["expected"].get<std::string>()) {
      ADD_FAILURE() << name << " x " << case_name << " differs " << first_difference(c["expected"], *got);
    } else {
      outcome = '=';
    }
    identical += outcome != 'X';
    table[name] += outcome;
  }

  std::string report = "chat template golden: " + std::to_string(identical) + "/" + std::to_string(total) +
                       " template x case identical to HF ('=' same text, 'r' both raise the same error, "
                       "'X' differs)\n";
  for (size_t i = 0; i < case_names.size(); ++i) {
    report += "  " + std::string(i, ' ') + "v " + case_names[i] + "\n";
  }
  for (const auto& [name, outcomes] : table) report += "  " + outcomes + "  " + name + "\n";
  std::printf("%s", report.c_str());
}

}  // namespace
}  // namespace rlrun::engine
