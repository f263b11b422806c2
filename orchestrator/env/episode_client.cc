// episode_client.cc - one libcurl multi handle, one easy handle per episode attempt.
#include "orchestrator/env/episode_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/http_body.h"
#include "common/json_nesting.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Attempt {
  uint64_t key = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string body;  // libcurl sends it in place
  CappedBody reply;
  char error[CURL_ERROR_SIZE] = {};
  Clock::time_point sent;

  ~Attempt() {
    curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
  }
};

}  // namespace

Result<EpisodeReply> parse_episode_reply(std::string_view body) {
  if (!json_nesting_within(body, 16)) return invalid_argument("the reply nests deeper than 16 levels");
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(str("the reply is not JSON: ", printable_snippet(body)));
  if (!j.is_object()) return invalid_argument(str("the reply is not a JSON object: ", printable_snippet(body)));
  EpisodeReply r;
  const auto reward = j.find("reward");
  if (reward == j.end() || !reward->is_number())
    return invalid_argument(str("the reply has no numeric \"reward\": ", printable_snippet(body)));
  r.reward = reward->get<double>();
  if (!std::isfinite(r.reward)) return invalid_argument("the reply's \"reward\" is not finite");
  if (const auto c = j.find("correct"); c != j.end() && !c->is_null()) {
    if (!c->is_boolean()) return invalid_argument("the reply's \"correct\" is not true or false");
    r.has_correct = true;
    r.correct = c->get<bool>();
  }
  if (const auto m = j.find("metrics"); m != j.end() && !m->is_null()) {
    if (!m->is_object()) return invalid_argument("the reply's \"metrics\" is not an object");
    if (m->size() > 64) return invalid_argument("the reply's \"metrics\" has more than 64 entries");
    for (const auto& [name, value] : m->items()) {
      if (!value.is_number() || !std::isfinite(value.get<double>()))
        return invalid_argument(str("the reply's metrics[\"", printable_snippet(name, 40), "\"] is not a finite number"));
      if (name.empty() || name.size() > 64) return invalid_argument("a metric name is empty or longer than 64 bytes");
      r.metrics[name] = value.get<double>();
    }
  }
  return r;
}

struct EpisodeClient::Impl {
  ~Impl() {
    for (const auto& a : running) curl_multi_remove_handle(multi, a->easy);
    running.clear();
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
  CURLM* multi = nullptr;
  std::vector<std::unique_ptr<Attempt>> running;
};

EpisodeClient::EpisodeClient(EpisodeClientOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

EpisodeClient::~EpisodeClient() = default;

Result<std::unique_ptr<EpisodeClient>> EpisodeClient::create(EpisodeClientOptions options) {
  const std::string& url = options.url;
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    return invalid_argument(str("task.environment_url \"", url, "\" is not an http:// or https:// URL"));
  if (!(options.timeout_seconds > 0))
    return invalid_argument(str("task.environment_timeout_seconds is ", options.timeout_seconds, "; it must be > 0"));
  if (options.max_response_bytes < 1) return invalid_argument("max_response_bytes must be >= 1");
  static std::once_flag once;
  static CURLcode init = CURLE_OK;
  std::call_once(once, [] { init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init != CURLE_OK) return internal_error(str("libcurl does not start: ", curl_easy_strerror(init)));
  std::unique_ptr<EpisodeClient> client(new EpisodeClient(std::move(options)));
  client->impl_->multi = curl_multi_init();
  if (client->impl_->multi == nullptr) return internal_error("libcurl: curl_multi_init failed");
  return client;
}

void EpisodeClient::start(uint64_t key, std::string body) {
  auto a = std::make_unique<Attempt>();
  a->key = key;
  a->body = std::move(body);
  a->reply.max_bytes = static_cast<size_t>(options_.max_response_bytes);
  a->easy = curl_easy_init();
  RLRUN_CHECK(a->easy != nullptr, "libcurl: curl_easy_init failed");
  a->headers = curl_slist_append(a->headers, "Content-Type: application/json");
  a->headers = curl_slist_append(a->headers, "Expect:");
  const long timeout_ms = std::max(1L, std::lround(options_.timeout_seconds * 1000));
  CURL* e = a->easy;
  curl_easy_setopt(e, CURLOPT_URL, options_.url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(e, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, a->body.data());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(a->body.size()));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, a->headers);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "rlrun");
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, append_capped);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &a->reply);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, a->error);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeout_ms, 10000L));
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  a->sent = Clock::now();
  const CURLMcode added = curl_multi_add_handle(impl_->multi, e);
  RLRUN_CHECK(added == CURLM_OK, str("libcurl: curl_multi_add_handle: ", curl_multi_strerror(added)));
  impl_->running.push_back(std::move(a));
}

std::vector<EpisodeEnd> EpisodeClient::poll() {
  std::vector<EpisodeEnd> out;
  int still = 0;
  curl_multi_perform(impl_->multi, &still);
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(impl_->multi, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL* easy = m->easy_handle;
    const CURLcode code = m->data.result;
    auto it = std::find_if(impl_->running.begin(), impl_->running.end(), [&](const auto& a) { return a->easy == easy; });
    if (it == impl_->running.end()) continue;
    std::unique_ptr<Attempt> a = std::move(*it);
    impl_->running.erase(it);
    curl_multi_remove_handle(impl_->multi, easy);
    EpisodeEnd end;
    end.key = a->key;
    end.seconds = std::chrono::duration<double>(Clock::now() - a->sent).count();
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK) {
      end.error = a->reply.too_big ? str("the reply is larger than ", options_.max_response_bytes, " bytes")
                  : code == CURLE_OPERATION_TIMEDOUT
                      ? str("no answer within task.environment_timeout_seconds = ", options_.timeout_seconds, " s")
                      : str(curl_easy_strerror(code), a->error[0] != 0 ? str(": ", a->error) : std::string());
    } else if (status != 200) {
      end.error = str("HTTP ", status, ": ", printable_snippet(a->reply.bytes));
    } else if (Result<EpisodeReply> r = parse_episode_reply(a->reply.bytes); !r.ok()) {
      end.error = std::string(r.status().message());
    } else {
      end.ok = true;
      end.reply = std::move(*r);
    }
    if (!end.ok) end.error = str(options_.url, ": ", end.error);
    out.push_back(std::move(end));
  }
  return out;
}

void EpisodeClient::abandon(uint64_t key) {
  auto it = std::find_if(impl_->running.begin(), impl_->running.end(), [&](const auto& a) { return a->key == key; });
  if (it == impl_->running.end()) return;
  curl_multi_remove_handle(impl_->multi, (*it)->easy);
  impl_->running.erase(it);
}

size_t EpisodeClient::running() const { return impl_->running.size(); }

}  // namespace rlrun::orchestrator
