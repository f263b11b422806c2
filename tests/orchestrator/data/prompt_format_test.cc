// PromptFormat (task.chat_template): raw text or one user message in a chat template; `auto`
// finds the model's template (tokenizer_config.json, chat_template.jinja, a .gguf), renders it as HF
// does (every template of the chat-template golden that renders a single user message), finds its end-of-turn token, and fails at creation naming task.chat_template when a
// template cannot render.
#include "orchestrator/data/prompt_format.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/file_io.h"
#include "orchestrator/roles/model_from_config.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// The built-in small tokenizer with the end-of-turn tokens of the common chat families added as
// special tokens (it has <|endoftext|>, <|im_start|> and <|im_end|> of its own).
engine::Tokenizer chat_tokenizer() {
  ordered_json j = ordered_json::parse(read_file(std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json", "").value());
  int32_t next = 0;
  for (const auto& t : j["added_tokens"]) next = std::max(next, t["id"].get<int32_t>() + 1);
  for (const auto& [name, _] : j["model"]["vocab"].items()) next = std::max(next, j["model"]["vocab"][name].get<int32_t>() + 1);
  for (const char* token : {"<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<start_of_turn>",
                            "<end_of_turn>", "</s>", "<s>", "[INST]", "[/INST]"}) {
    j["added_tokens"].push_back({{"id", next++}, {"content", token}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  Result<engine::Tokenizer> t = engine::Tokenizer::from_json(j.dump(), "tiny.json + chat tokens");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(*t);
}

// A model folder with tokenizer_config.json holding `config`; returns its tokenizer.json path.
std::string model_folder(const testing::TempDir& dir, const std::string& name, const ordered_json& config) {
  const fs::path folder = fs::path(dir.path()) / name;
  fs::create_directories(folder);
  std::ofstream(folder / "tokenizer_config.json") << config.dump();
  return (folder / "tokenizer.json").string();
}

const char* kChatML =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(PromptFormat, RawAndNoneEncodeTheTextAsItIs) {
  const engine::Tokenizer tok = chat_tokenizer();
  testing::TempDir dir;
  const std::string path = model_folder(dir, "m", {{"chat_template", kChatML}});
  for (const PromptFormat& f : {PromptFormat::raw(tok), PromptFormat::create("none", path, tok).value(),
                                PromptFormat::create("auto", "", tok).value()}) {
    EXPECT_FALSE(f.is_chat());
    EXPECT_EQ(f.ids("reverse abc:").value(), tok.encode("reverse abc:"));
    EXPECT_EQ(f.end_of_turn(), std::nullopt);
  }
  const PromptFormat no_template = PromptFormat::create("auto", model_folder(dir, "plain", {{"eos_token", "</s>"}}), tok).value();
  EXPECT_FALSE(no_template.is_chat()) << "a model without a template gets the raw text";
}

TEST(PromptFormat, AutoRendersTheModelsTemplateAndFindsItsEndOfTurn) {
  const engine::Tokenizer tok = chat_tokenizer();
  testing::TempDir dir;
  const std::string path = model_folder(dir, "m", {{"chat_template", kChatML}, {"eos_token", {{"content", "<|im_end|>"}}}});
  const PromptFormat f = PromptFormat::create("auto", path, tok).value();
  ASSERT_TRUE(f.is_chat());
  EXPECT_EQ(f.text("reverse abc:").value(), "<|im_start|>user\nreverse abc:<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(f.ids("reverse abc:").value(), tok.encode(f.text("reverse abc:").value()));
  EXPECT_EQ(f.end_of_turn(), tok.token_to_id("<|im_end|>"));
  EXPECT_NE(f.description().find("tokenizer_config.json"), std::string::npos) << f.description();
}

TEST(PromptFormat, NamedTemplatesAJinjaFileAndATemplatePath) {
  const engine::Tokenizer tok = chat_tokenizer();
  testing::TempDir dir;
  // A list of named templates: "default" is the one for chat without tools.
  const ordered_json named = ordered_json::array(
      {{{"name", "tool_use"}, {"template", "TOOLS"}}, {{"name", "default"}, {"template", kChatML}}});
  EXPECT_TRUE(PromptFormat::create("auto", model_folder(dir, "named", {{"chat_template", named}}), tok)
                  .value().text("x").value().ends_with("<|im_start|>assistant\n"));
  // chat_template.jinja beside tokenizer_config.json wins, as in HF.
  const std::string path = model_folder(dir, "jinja", {{"chat_template", "IGNORED"}, {"bos_token", "<s>"}});
  std::ofstream(fs::path(path).parent_path() / "chat_template.jinja") << "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]";
  EXPECT_EQ(PromptFormat::create("auto", path, tok).value().text("hi").value(), "<s>[INST] hi [/INST]");
  // A template file named by task.chat_template, with the model's special tokens.
  const std::string file = dir.path() + "/mine.jinja";
  std::ofstream(file) << "{{ bos_token }}Q: {{ messages[-1].content }}\nA:";
  EXPECT_EQ(PromptFormat::create(file, path, tok).value().text("2+2?").value(), "<s>Q: 2+2?\nA:");
}

TEST(PromptFormat, ATemplateThatCannotRenderFailsAtCreationNamingTheKeyAndLine) {
  const engine::Tokenizer tok = chat_tokenizer();
  testing::TempDir dir;
  const std::string raises = model_folder(
      dir, "raises", {{"chat_template", "{% if messages[0]['role'] == 'user' %}\n{{ raise_exception('no users here') }}{% endif %}"}});
  Result<PromptFormat> f = PromptFormat::create("auto", raises, tok);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("task.chat_template"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("no users here"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("line 2"), std::string::npos) << f.status().message();
  Result<PromptFormat> broken = PromptFormat::create("auto", model_folder(dir, "broken", {{"chat_template", "{% for %}"}}), tok);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("task.chat_template"), std::string::npos) << broken.status().message();
  EXPECT_FALSE(PromptFormat::create("auto", model_folder(dir, "bad", {{"chat_template", 7}}), tok).ok());
  EXPECT_FALSE(PromptFormat::create(dir.path() + "/missing.jinja", "", tok).ok());
}

// Every real template of the golden (scripts/chat_template_golden.py: HF's apply_chat_template)
// whose single-user-message case renders (at the golden's clock): PromptFormat through
// tokenizer_config.json gives HF's text, and the end-of-turn of the families the issue names.
TEST(PromptFormat, RealTemplatesRenderAUserMessageAsHF) {
  const fs::path golden_path = testing::smollm2_dir().parent_path() / "chat-templates/golden.json";
  if (!fs::exists(golden_path)) {
    if (testing::skip_model_tests()) GTEST_SKIP() << golden_path << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << golden_path << " is missing: run scripts/fetch-test-models.sh, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  const ordered_json golden = ordered_json::parse(read_file(golden_path.string(), "").value());
  const engine::Tokenizer tok = chat_tokenizer();
  std::tm now{};  // the golden's clock, "2024-09-05T14:30:07"
  ASSERT_NE(strptime(golden["now"].get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%S", &now), nullptr);
  testing::TempDir dir;
  int compared = 0;
  std::map<std::string, std::string> end_of_turn;
  for (const auto& c : golden["cases"]) {
    if (c["case"] != "single_user" || !c.contains("expected") || !c["expected"].is_string()) continue;
    const std::string expected = c["expected"], name = c["template"];
    const ordered_json& t = golden["templates"][name];
    ordered_json config = t["special_tokens"];
    config["chat_template"] = t["source"];
    Result<PromptFormat> f = PromptFormat::create("auto", model_folder(dir, name, config), tok, [now] { return now; });
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().message();
    if (f->end_of_turn()) end_of_turn[name] = tok.id_to_token(*f->end_of_turn()).value_or("?");
    EXPECT_EQ(f->text(c["messages"][0]["content"]).value(), expected) << name;
    ++compared;
  }
  std::printf("[prompt format] %d templates render a user message as HF\n", compared);
  EXPECT_GE(compared, 60);
  // A dataset's chat rows (Problem::messages_json) render whole, as HF renders the same messages.
  int chats = 0;
  for (const auto& c : golden["cases"]) {
    const std::string kind = c["case"];
    if ((kind != "system_user" && kind != "multi_turn_gen" && kind != "user_user") || !c["expected"].is_string() ||
        !c["tools"].is_null() || !c["documents"].is_null() || !c["kwargs"].empty())
      continue;
    const std::string name = c["template"];
    const ordered_json& t = golden["templates"][name];
    ordered_json config = t["special_tokens"];
    config["chat_template"] = t["source"];
    Result<PromptFormat> f = PromptFormat::create("auto", model_folder(dir, name, config), tok, [now] { return now; });
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().message();
    Problem chat;
    chat.messages_json = c["messages"].dump();
    EXPECT_EQ(f->text(chat).value(), c["expected"].get<std::string>()) << name << " " << kind;
    ++chats;
  }
  std::printf("[prompt format] %d chats (system + user, multi-turn, user + user) render as HF\n", chats);
  EXPECT_GE(chats, 150);
  Problem chat;
  chat.messages_json = R"([{"role": "user", "content": "hi"}])";
  Result<std::string> raw = PromptFormat::raw(tok).text(chat);
  ASSERT_FALSE(raw.ok());
  EXPECT_NE(raw.status().message().find("needs a chat template"), std::string::npos) << raw.status().message();
  EXPECT_EQ(end_of_turn["HuggingFaceTB-SmolLM2-135M-Instruct"], "<|im_end|>");
  EXPECT_EQ(end_of_turn["Qwen-Qwen2.5-7B-Instruct"], "<|im_end|>");
  EXPECT_EQ(end_of_turn["google-gemma-2-2b-it"], "<end_of_turn>");
  EXPECT_EQ(end_of_turn["mistralai-Mistral-Nemo-Instruct-2407"], "</s>");
  EXPECT_EQ(end_of_turn["meta-llama-Llama-3.1-8B-Instruct"], "<|eot_id|>");
}

}  // namespace
}  // namespace rlrun::orchestrator
