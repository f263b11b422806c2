// The reward server client: a queue of items, requests in flight on one libcurl multi handle
// (which keeps connections alive between requests), and the failure rules of http_reward.h.
#include "orchestrator/reward/http_reward.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/check.h"
#include "common/http_body.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Queued {
  RewardItem item;
  json metadata;        // item.metadata_json, parsed by submit()
  bool waited = false;  // counted in Stats::items_waited (or retried)
};

// One request in flight. Owns its easy handle, which must leave the multi handle first.
struct Request {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::vector<Queued> items;
  std::string body;  // libcurl sends it in place
  CappedBody reply;
  char error[CURL_ERROR_SIZE] = {};
  Clock::time_point sent;

  ~Request() {
    curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
  }
};

std::string request_body(const std::vector<Queued>& items) {
  json query = json::array(), prompts = json::array(), labels = json::array(), metadata = json::array();
  for (const Queued& q : items) {
    query.push_back(q.item.query);
    prompts.push_back(q.item.prompt);
    labels.push_back(q.item.label);
    metadata.push_back(q.metadata);
  }
  const json body = {{"query", std::move(query)}, {"prompts", std::move(prompts)},
                     {"labels", std::move(labels)}, {"metadata", std::move(metadata)}};
  // Completions may hold invalid UTF-8 (a token cut inside a character): sent as U+FFFD.
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status global_init() {
  static std::once_flag once;
  static CURLcode code = CURLE_OK;
  std::call_once(once, [] { code = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (code != CURLE_OK) return internal_error(str("libcurl does not start: ", curl_easy_strerror(code)));
  return {};
}

}  // namespace

struct HttpRewardClient::Impl {
  explicit Impl(const HttpRewardOptions& o) : options(o) {}
  ~Impl() {
    for (const auto& r : in_flight) curl_multi_remove_handle(multi, r->easy);
    in_flight.clear();
    curl_multi_cleanup(multi);
  }

  void start_requests();
  void start(std::vector<Queued> items);
  void collect_finished(std::vector<RewardReply>* out);
  void finish(Request& r, CURLcode code, std::vector<RewardReply>* out);
  void fail(Request& r, const std::string& what);
  void put_back(std::vector<Queued>& items);
  void cancel_in_flight();

  const HttpRewardOptions& options;
  CURLM* multi = nullptr;
  std::deque<Queued> queue;
  std::vector<std::unique_ptr<Request>> in_flight;
  std::unordered_set<uint64_t> waiting;  // every key queued or in flight
  Clock::time_point retry_at{};
  int64_t failures_in_row = 0;
  Status fatal;
  Stats stats;
  std::deque<double> round_trips;  // the last kRoundTripWindow successful ones
  log::RateLimited failure_log{std::chrono::seconds(10)};
};

HttpRewardOptions http_reward_options(const TaskSection& task) {
  HttpRewardOptions o;
  o.url = task.reward_url;
  o.timeout_seconds = task.reward_timeout_seconds;
  o.max_failures = task.reward_max_failures;
  o.batch_size = task.reward_batch_size;
  o.max_in_flight = task.reward_max_in_flight;
  return o;
}

double http_reward_backoff_seconds(const HttpRewardOptions& options, int64_t failures_in_row) {
  const int doublings = static_cast<int>(std::clamp<int64_t>(failures_in_row - 1, 0, 60));
  return std::min(options.max_backoff_seconds, std::ldexp(options.first_backoff_seconds, doublings));
}

HttpRewardClient::HttpRewardClient(HttpRewardOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {}

HttpRewardClient::~HttpRewardClient() = default;

Result<std::unique_ptr<HttpRewardClient>> HttpRewardClient::create(HttpRewardOptions options) {
  const std::string& url = options.url;
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    return invalid_argument(str("task.reward_url \"", url, "\" is not an http:// or https:// URL"));
  const auto below = [](const char* key, double value, const char* bound) {
    return invalid_argument(str(key, " is ", value, "; it must be ", bound));
  };
  if (!(options.timeout_seconds > 0)) return below("task.reward_timeout_seconds", options.timeout_seconds, "> 0");
  if (options.max_failures < 1) return below("task.reward_max_failures", options.max_failures, ">= 1");
  if (options.batch_size < 1) return below("task.reward_batch_size", options.batch_size, ">= 1");
  if (options.max_in_flight < 1) return below("task.reward_max_in_flight", options.max_in_flight, ">= 1");
  if (!(options.first_backoff_seconds >= 0) || !(options.max_backoff_seconds >= options.first_backoff_seconds))
    return invalid_argument(str("reward back-off ", options.first_backoff_seconds, " .. ", options.max_backoff_seconds,
                                " s: needs 0 <= first <= max"));
  if (options.max_response_bytes < 1)
    return below("max_response_bytes", static_cast<double>(options.max_response_bytes), ">= 1");
  RLRUN_RETURN_IF_ERROR(global_init());
  std::unique_ptr<HttpRewardClient> client(new HttpRewardClient(std::move(options)));
  client->impl_->multi = curl_multi_init();
  if (client->impl_->multi == nullptr) return internal_error("libcurl: curl_multi_init failed");
  return client;
}

Status HttpRewardClient::submit(RewardItem item) {
  Impl& s = *impl_;
  if (s.waiting.count(item.key) > 0)
    return invalid_argument(str("reward item ", item.key, " is already waiting for its reward"));
  json metadata = json::parse(item.metadata_json, nullptr, /*allow_exceptions=*/false);
  if (!metadata.is_object())
    return invalid_argument(
        str("reward item ", item.key, ": metadata is not a JSON object: ", printable_snippet(item.metadata_json, 60)));
  s.waiting.insert(item.key);
  s.queue.push_back({std::move(item), std::move(metadata), false});
  return {};
}

std::vector<RewardReply> HttpRewardClient::poll() {
  Impl& s = *impl_;
  std::vector<RewardReply> out;
  if (!s.fatal.ok()) return out;
  int running = 0;
  curl_multi_perform(s.multi, &running);
  s.collect_finished(&out);
  if (!s.fatal.ok()) return out;
  const size_t before = s.in_flight.size();
  s.start_requests();
  if (s.in_flight.size() != before) curl_multi_perform(s.multi, &running);  // start connecting now
  for (Queued& q : s.queue) {
    if (!q.waited) {
      q.waited = true;
      ++s.stats.items_waited;
    }
  }
  return out;
}

void HttpRewardClient::Impl::start_requests() {
  if (Clock::now() < retry_at) return;
  // While requests fail, one at a time probes the server.
  const size_t slots = failures_in_row > 0 ? 1 : static_cast<size_t>(options.max_in_flight);
  while (!queue.empty() && in_flight.size() < slots) {
    const size_t n = std::min(queue.size(), static_cast<size_t>(options.batch_size));
    std::vector<Queued> items(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.begin() + n));
    queue.erase(queue.begin(), queue.begin() + n);
    start(std::move(items));
  }
}

void HttpRewardClient::Impl::start(std::vector<Queued> items) {
  auto r = std::make_unique<Request>();
  r->items = std::move(items);
  r->body = request_body(r->items);
  r->reply.max_bytes = static_cast<size_t>(options.max_response_bytes);
  r->easy = curl_easy_init();
  RLRUN_CHECK(r->easy != nullptr, "libcurl: curl_easy_init failed");
  r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
  r->headers = curl_slist_append(r->headers, "Expect:");  // no 100-continue round trip
  const long timeout_ms = std::max(1L, std::lround(options.timeout_seconds * 1000));
  CURL* e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, options.url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(e, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body.data());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r->body.size()));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "rlrun");
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, append_capped);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &r->reply);
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options.max_response_bytes));
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  r->sent = Clock::now();
  const CURLMcode added = curl_multi_add_handle(multi, e);
  RLRUN_CHECK(added == CURLM_OK, str("libcurl: curl_multi_add_handle: ", curl_multi_strerror(added)));
  ++stats.requests;
  in_flight.push_back(std::move(r));
}

void HttpRewardClient::Impl::collect_finished(std::vector<RewardReply>* out) {
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL* easy = m->easy_handle;
    const CURLcode code = m->data.result;  // m is gone once the handle leaves the multi handle
    const auto it = std::find_if(in_flight.begin(), in_flight.end(), [&](const auto& r) { return r->easy == easy; });
    RLRUN_CHECK(it != in_flight.end(), "libcurl finished a transfer this client did not start");
    std::unique_ptr<Request> r = std::move(*it);
    in_flight.erase(it);
    curl_multi_remove_handle(multi, easy);
    finish(*r, code, out);
    if (!fatal.ok()) return;
  }
}

void HttpRewardClient::Impl::finish(Request& r, CURLcode code, std::vector<RewardReply>* out) {
  const double seconds = std::chrono::duration<double>(Clock::now() - r.sent).count();
  if (r.reply.too_big || code == CURLE_FILESIZE_EXCEEDED)
    return fail(r, str("the reply is larger than ", options.max_response_bytes, " bytes"));
  if (code != CURLE_OK) return fail(r, str(curl_easy_strerror(code), r.error[0] ? str(": ", r.error) : ""));
  long status = 0;
  curl_easy_getinfo(r.easy, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) return fail(r, str("HTTP ", status, ": ", printable_snippet(r.reply.bytes)));
  std::vector<uint64_t> keys;
  for (const Queued& q : r.items) keys.push_back(q.item.key);
  Result<std::vector<RewardReply>> replies = parse_reward_reply(r.reply.bytes, keys);
  if (!replies.ok()) return fail(r, str(replies.status().message(), "; the reply: ", printable_snippet(r.reply.bytes)));
  for (RewardReply& reply : *replies) {
    RLRUN_CHECK(waiting.erase(reply.key) == 1, str("reward item ", reply.key, " answered twice"));
    out->push_back(std::move(reply));
  }
  stats.items_scored += static_cast<int64_t>(keys.size());
  stats.round_trip_last_seconds = seconds;
  round_trips.push_back(seconds);
  if (round_trips.size() > kRoundTripWindow) round_trips.pop_front();
  failures_in_row = 0;
  retry_at = {};
}

void HttpRewardClient::Impl::fail(Request& r, const std::string& what) {
  ++stats.failed_requests;
  ++failures_in_row;
  stats.items_retried += static_cast<int64_t>(r.items.size());
  const size_t n = r.items.size();
  put_back(r.items);
  if (failures_in_row >= options.max_failures) {
    fatal = unavailable(str("reward server ", options.url, ": ", failures_in_row,
                            " requests failed in a row (task.reward_max_failures: ", options.max_failures,
                            "); the last: ", what, ". Check that the server is up and answers POST with "
                            "{\"rewards\": [...]} (see examples/reward_server.py)"));
    log::error(fatal.message());
    cancel_in_flight();
    return;
  }
  const double backoff = http_reward_backoff_seconds(options, failures_in_row);
  retry_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff));
  failure_log.write(log::Level::kWarn, str("reward server ", options.url, ": a request of ", n, " samples failed (",
                                           what, "); retrying in ", backoff, " s (", failures_in_row, " of ",
                                           options.max_failures, " failures in a row allowed)"));
}

void HttpRewardClient::Impl::put_back(std::vector<Queued>& items) {
  for (Queued& q : items) q.waited = true;
  queue.insert(queue.begin(), std::make_move_iterator(items.begin()), std::make_move_iterator(items.end()));
  items.clear();
}

void HttpRewardClient::Impl::cancel_in_flight() {
  // Last started first, so that put_back keeps the queue in the order items were sent.
  for (auto it = in_flight.rbegin(); it != in_flight.rend(); ++it) {
    curl_multi_remove_handle(multi, (*it)->easy);
    put_back((*it)->items);
  }
  in_flight.clear();
}

size_t HttpRewardClient::waiting() const { return impl_->waiting.size(); }

const Status& HttpRewardClient::fatal() const { return impl_->fatal; }

std::vector<uint64_t> HttpRewardClient::abandon() {
  Impl& s = *impl_;
  std::vector<uint64_t> keys;
  for (const Queued& q : s.queue) keys.push_back(q.item.key);
  for (const auto& r : s.in_flight) {
    curl_multi_remove_handle(s.multi, r->easy);
    for (const Queued& q : r->items) keys.push_back(q.item.key);
  }
  RLRUN_CHECK(keys.size() == s.waiting.size(), "the reward client lost track of an item");
  s.in_flight.clear();
  s.queue.clear();
  s.waiting.clear();
  return keys;
}

HttpRewardClient::Stats HttpRewardClient::stats() const {
  const Impl& s = *impl_;
  Stats st = s.stats;
  st.failures_in_row = s.failures_in_row;
  st.in_flight = static_cast<int64_t>(s.in_flight.size());
  if (!s.round_trips.empty()) {
    std::vector<double> sorted(s.round_trips.begin(), s.round_trips.end());
    std::sort(sorted.begin(), sorted.end());
    st.round_trip_median_seconds = sorted[sorted.size() / 2];
    st.round_trip_max_seconds = sorted.back();
  }
  return st;
}

}  // namespace rlrun::orchestrator
