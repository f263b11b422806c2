// The reward server's reply, checked against the protocol (http_reward.h). The body is
// untrusted: every departure is an error that says what came back, never an exception.
#include <cmath>
#include <nlohmann/json.hpp>

#include "orchestrator/reward/http_reward.h"

namespace rlrun::orchestrator {
namespace {

using nlohmann::json;

constexpr size_t kMaxExtraLogs = 64;  // names in "extra_logs": more is a hostile or broken server

// Python's json.dumps writes NaN and Infinity as bare words, which JSON does not allow. Quoted,
// the body parses and the check below names the value instead of calling the reply "not JSON".
std::string quote_non_finite_words(std::string_view body) {
  std::string out;
  out.reserve(body.size() + 16);
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      out += c;
      continue;
    }
    if (c == '"') in_string = true;
    bool word = false;
    for (std::string_view w : {"-Infinity", "Infinity", "NaN"}) {
      if (body.substr(i, w.size()) == w) {
        out.append("\"").append(w).append("\"");
        i += w.size() - 1;
        word = true;
        break;
      }
    }
    if (!word) out += c;
  }
  return out;
}

json parse_body(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  const bool non_finite_words =
      body.find("NaN") != std::string_view::npos || body.find("Infinity") != std::string_view::npos;
  if (j.is_discarded() && non_finite_words)
    j = json::parse(quote_non_finite_words(body), nullptr, /*allow_exceptions=*/false);
  return j;
}

// A short printable rendering of an untrusted value for a message.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

// `array`[i] as a finite number, or an error naming `what`[i]. Booleans count as 0/1 where
// `allow_bool` (extra_logs); "NaN" and the infinities arrive quoted (quote_non_finite_words).
Result<double> number_at(const json& array, size_t i, const std::string& what, bool allow_bool) {
  const json& v = array[i];
  if (v.is_boolean() && allow_bool) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN" || s == "Infinity" || s == "-Infinity") return protocol_error(str(what, "[", i, "] is ", s));
  }
  if (!v.is_number()) return protocol_error(str(what, "[", i, "] is not a number: ", shown(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return protocol_error(str(what, "[", i, "] is ", d));
  return d;
}

Status check_length(const json& v, size_t n, const std::string& what) {
  if (!v.is_array()) return protocol_error(str(what, " is not an array: ", shown(v)));
  if (v.size() != n) {
    if (what == "rewards") return protocol_error(str(v.size(), " rewards for ", n, " samples"));
    return protocol_error(str(what, " has ", v.size(), " entries for ", n, " samples"));
  }
  return {};
}

}  // namespace

Result<std::vector<RewardReply>> parse_reward_reply(std::string_view body, const std::vector<uint64_t>& keys) {
  const size_t n = keys.size();
  const json reply = parse_body(body);
  if (reply.is_discarded()) return protocol_error("the reply is not JSON");
  if (!reply.is_object()) return protocol_error("the reply is not a JSON object");
  const auto rewards = reply.find("rewards");
  if (rewards == reply.end()) return protocol_error("the reply has no \"rewards\"");
  RLRUN_RETURN_IF_ERROR(check_length(*rewards, n, "rewards"));
  std::vector<RewardReply> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].key = keys[i];
    RLRUN_ASSIGN_OR_RETURN(out[i].reward, number_at(*rewards, i, "rewards", false));
    out[i].score = out[i].reward;
  }
  if (const auto scores = reply.find("scores"); scores != reply.end() && !scores->is_null()) {
    RLRUN_RETURN_IF_ERROR(check_length(*scores, n, "scores"));
    for (size_t i = 0; i < n; ++i) {
      RLRUN_ASSIGN_OR_RETURN(out[i].score, number_at(*scores, i, "scores", false));
    }
  }
  if (const auto extra = reply.find("extra_logs"); extra != reply.end() && !extra->is_null()) {
    if (!extra->is_object()) return protocol_error(str("extra_logs is not an object: ", shown(*extra)));
    if (extra->size() > kMaxExtraLogs)
      return protocol_error(str("extra_logs has ", extra->size(), " names (at most ", kMaxExtraLogs, ")"));
    for (const auto& [name, values] : extra->items()) {
      const std::string what = str("extra_logs \"", name.substr(0, 60), "\"");
      RLRUN_RETURN_IF_ERROR(check_length(values, n, what));
      for (size_t i = 0; i < n; ++i) {
        RLRUN_ASSIGN_OR_RETURN(out[i].extra[name], number_at(values, i, what, true));
      }
    }
  }
  return out;
}

}  // namespace rlrun::orchestrator
