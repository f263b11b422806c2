// The key table: configs/defaults.yaml agrees with it, every key is sound and documented, and
// the example configs validate.
#include "common/config/schema.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/common/config_test_util.h"

namespace rlrun {
namespace {

using ::testing::HasSubstr;

std::string repo_file(const std::string& relative) {
  return std::string(RLRUN_SOURCE_DIR) + "/" + relative;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ConfigSchema, DefaultsYamlIsExactlyTheRenderedSchema) {
  EXPECT_EQ(read_text(repo_file("configs/defaults.yaml")), render_defaults_yaml())
      << "configs/defaults.yaml is out of date; regenerate it with\n"
         "  build/rlrun validate --print-defaults > configs/defaults.yaml";
}

// docs/configuration.md, the configuration reference, is generated from keys.def: a key missing
// from it, or any other difference, means the page is stale.
TEST(ConfigSchema, TheConfigurationReferenceListsEveryKeyAndIsNotStale) {
  const std::string page = read_text(repo_file("docs/configuration.md"));
  for (const KeySpec& key : config_keys()) {
    const std::string row = "| `" + key.dotted_name() + "` | ";
    EXPECT_NE(page.find(row), std::string::npos) << key.dotted_name() << " is missing from docs/configuration.md";
  }
  EXPECT_EQ(page, render_config_reference())
      << "docs/configuration.md is out of date; regenerate it with\n"
         "  build/rlrun validate --print-reference > docs/configuration.md";
}

TEST(ConfigSchema, TheConfigurationReferenceGivesEachKeyItsTypeDefaultAndRange) {
  const std::string page = render_config_reference();
  EXPECT_NE(page.find("| `max_async_rollout` | integer | `1` | [0, "), std::string::npos) << page;
  EXPECT_NE(page.find("| `algorithm` | choice | `grpo` | `grpo`, `dr_grpo`, `rloo`, `gspo` |"), std::string::npos);
  EXPECT_NE(page.find("| `model.checkpoint` | path |"), std::string::npos);
  EXPECT_NE(page.find("| `task.reward` | string |"), std::string::npos);
  EXPECT_NE(page.find("## `task:`"), std::string::npos);
}

TEST(ConfigSchema, DefaultsYamlHoldsEveryKeyWithItsDefaultAndNoOther) {
  const YAML::Node root = YAML::LoadFile(repo_file("configs/defaults.yaml"));
  std::set<std::string> in_file;
  for (const auto& entry : root) {
    const std::string name = entry.first.Scalar();
    if (entry.second.IsMap()) {
      for (const auto& inner : entry.second) in_file.insert(name + "." + inner.first.Scalar());
    } else {
      in_file.insert(name);
    }
  }
  std::set<std::string> in_schema;
  const Config defaults;
  for (const KeySpec& key : config_keys()) {
    const std::string dotted = key.dotted_name();
    in_schema.insert(dotted);
    const YAML::Node value = key.section == ConfigSection::kTop
                                 ? root[std::string(key.name)]
                                 : root[std::string(section_name(key.section))][std::string(key.name)];
    ASSERT_TRUE(value.IsScalar()) << dotted << " missing from defaults.yaml";
    Result<ConfigValue> parsed = parse_config_value(key, value.Scalar());
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(*parsed, key.get(defaults)) << dotted << " has another default in defaults.yaml";
  }
  EXPECT_EQ(in_file, in_schema);
  // And the loader reads it back to the defaults, its relative paths relative to its folder.
  Result<Config> loaded = load_config(repo_file("configs/defaults.yaml"), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Config expected = defaults;
  expected.run_dir = (std::filesystem::path(repo_file("configs")) / defaults.run_dir).lexically_normal().string();
  EXPECT_EQ(render_config(*loaded), render_config(expected));
}

TEST(ConfigSchema, KeysAreUniqueDocumentedAndTheirDefaultsAllowed) {
  std::set<std::string> names;
  const Config defaults;
  for (const KeySpec& key : config_keys()) {
    const std::string dotted = key.dotted_name();
    EXPECT_TRUE(names.insert(dotted).second) << dotted << " declared twice";
    EXPECT_FALSE(key.comment.empty()) << dotted;
    EXPECT_EQ(key.comment.find('\n'), std::string_view::npos) << dotted;
    EXPECT_FALSE(key.group.empty()) << dotted;
    // The default passes the key's own checks.
    const std::string text = format_config_value(key, key.get(defaults));
    const YAML::Node node = YAML::Load(text);
    Result<ConfigValue> parsed = parse_config_value(key, node.Scalar());
    EXPECT_TRUE(parsed.ok()) << dotted << ": " << parsed.status().message();
  }
  EXPECT_GE(names.size(), 90u);
}

TEST(ConfigSchema, EveryEnumValueRoundTrips) {
  for (const KeySpec& key : config_keys()) {
    if (key.type != ValueType::kEnum) continue;
    for (int i = 0; !nth_choice(key.choices, i).empty(); ++i) {
      Config c;
      const std::string choice(nth_choice(key.choices, i));
      key.set(c, ConfigValue(choice));
      EXPECT_EQ(key.get(c), ConfigValue(choice)) << key.dotted_name();
    }
  }
  EXPECT_EQ(enum_name(Algorithm::kDrGrpo), "dr_grpo");
  EXPECT_EQ(enum_name(log::Level::kWarn), "warn");
  EXPECT_EQ(enum_name(Placement::kSpread), "SPREAD");
}

// A key that nothing but the config code reads is a promise the run does not keep (several once
// were: task.prompt_field, enable_prompt_prefetch, ...). Every key must appear as a member read,
// `config.KEY`, `c.task.KEY`, `model.KEY` and the like, in a source file that is not config code.
TEST(ConfigSchema, EveryKeyIsReadOutsideTheConfigCode) {
  namespace fs = std::filesystem;
  const std::set<std::string> holders = {"c", "c_", "config", "config_", "cfg", "t", "m", "model", "task"};
  std::set<std::string> read;  // "seq_len", "model.hidden_size", "task.dataset"
  auto ident_at = [](const std::string& s, size_t i) {
    size_t j = i;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
    return s.substr(i, j - i);
  };
  for (const char* dir : {"common", "engine", "trainer", "rollout", "orchestrator"}) {
    for (const auto& entry : fs::recursive_directory_iterator(repo_file(dir))) {
      const std::string ext = entry.path().extension().string();
      if (entry.path().string().find("/common/config/") != std::string::npos ||
          (ext != ".cc" && ext != ".h" && ext != ".in"))
        continue;
      const std::string text = read_text(entry.path().string());
      for (size_t dot = text.find('.'); dot != std::string::npos; dot = text.find('.', dot + 1)) {
        size_t start = dot;
        while (start > 0 && (std::isalnum(static_cast<unsigned char>(text[start - 1])) || text[start - 1] == '_')) --start;
        const std::string holder = text.substr(start, dot - start);
        if (!holders.count(holder) || (start > 0 && (text[start - 1] == '.' || text[start - 1] == '>'))) continue;
        std::string key = ident_at(text, dot + 1);
        const size_t after = dot + 1 + key.size();
        if ((key == "task" || key == "model") && after < text.size() && text[after] == '.') {
          key.append(1, '.').append(ident_at(text, after + 1));
        } else if (holder == "task" || holder == "t") {
          key.insert(0, "task.");
        } else if (holder == "model" || holder == "m") {
          key.insert(0, "model.");
        }
        read.insert(key);
      }
    }
  }
  for (const KeySpec& k : config_keys()) {
    EXPECT_TRUE(read.count(k.dotted_name())) << "`" << k.dotted_name()
                                             << "` is read by nothing but the config code: implement it or remove it";
  }
}

TEST(ConfigSchema, ReferenceVocabularyIsKept) {
  for (const char* name :
       {"inference_num_workers", "inference_tensor_parallel_size", "trainer_num_workers",
        "max_concurrent_prompts_per_server", "prompts_batch_size_for_trainer", "number_of_steps",
        "max_async_rollout", "max_off_policy_steps", "number_of_minibatches", "group_size",
        "seq_len", "pad_to_multiple_of", "enable_individual_sample_lanes",
        "enable_prompt_prefetch", "discard_group_zero_advantage",
        "gpu_memory_utilization", "max_model_len", "max_tokens", "weight_broadcast_bucket_mb",
        "weight_broadcast_free_grad_buffers",
        "weight_broadcast_cpu_staging", "gradient_checkpointing", "use_distributed_optimizer",
        "placement", "model.checkpoint", "task.dataset"}) {
    EXPECT_NE(find_dotted_key(name), nullptr) << name;
  }
}

TEST(ConfigSchema, EditDistanceAndSuggestions) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("Seed", "seed"), 0u);
  const std::vector<std::string_view> names = {"seed", "seq_len", "group_size"};
  EXPECT_EQ(closest_name("sed", names), "seed");
  EXPECT_EQ(closest_name("SEED", names), "seed");
  EXPECT_EQ(closest_name("seed", names), "");  // exact: nothing to suggest
  EXPECT_EQ(closest_name("xyzzy", names), "");
}

TEST(ConfigSchema, BoundsDescribeThemselves) {
  EXPECT_EQ((Bounds{0, 1, true, false}).describe(), "(0, 1]");
  EXPECT_EQ((Bounds{1, 4096}).describe(), "[1, 4096]");
  EXPECT_EQ((Bounds{0, Bounds{}.hi, true, false}).describe(), "> 0");
  EXPECT_EQ(Bounds{}.describe(), "any");
  EXPECT_FALSE((Bounds{0, 1, true, false}).contains(0));
  EXPECT_TRUE((Bounds{0, 1, true, false}).contains(1));
}

TEST(ConfigSchema, ExampleConfigsValidate) {
  for (const char* name : {"configs/quickstart.yaml", "configs/tiny.yaml"}) {
    Result<Config> c = load_config(repo_file(name), {});
    EXPECT_TRUE(c.ok()) << name << ":\n" << c.status().message();
  }
  Result<Config> quick = load_config(repo_file("configs/quickstart.yaml"), {});
  ASSERT_TRUE(quick.ok());
  EXPECT_EQ(quick->launcher, LauncherKind::kLocal);
  EXPECT_EQ(quick->backend, BackendKind::kCpu);
  EXPECT_EQ(quick->metrics_bind, "127.0.0.1:9400");
  EXPECT_EQ(quick->task.name, TaskName::kReverse);
  EXPECT_GT(quick->format_warm_start_steps, 0);
  Result<Config> tiny = load_config(repo_file("configs/tiny.yaml"), {});
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->metrics_bind, "127.0.0.1:0");
  EXPECT_LT(tiny->model.hidden_size, quick->model.hidden_size);
}

}  // namespace
}  // namespace rlrun
