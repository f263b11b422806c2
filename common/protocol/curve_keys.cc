// curve_keys.cc - key generation, the key file (one `name value` per line) and key checks.
#include "common/file_io.h"
#include "common/protocol/curve_keys.h"

#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <zmq.h>

#include "common/atomic_file.h"
#include "common/observe/log.h"

namespace rlrun {

namespace {

constexpr const char* kKeyNames[] = {"server_public", "server_secret", "client_public", "client_secret"};

bool is_z85_key(std::string_view z85) {
  if (z85.size() != kZ85KeyChars) return false;
  std::array<uint8_t, 32> bytes;
  const std::string text(z85);  // zmq_z85_decode needs a NUL-terminated string
  return zmq_z85_decode(bytes.data(), text.c_str()) != nullptr;
}

std::string* key_slot(RunKeys& keys, std::string_view name) {
  if (name == "server_public") return &keys.server_public;
  if (name == "server_secret") return &keys.server_secret;
  if (name == "client_public") return &keys.client_public;
  if (name == "client_secret") return &keys.client_secret;
  return nullptr;
}

// Parses the `name value` lines; the error never quotes a value (it may be a secret).
Result<RunKeys> parse_run_keys(const std::string& text, const std::string& path) {
  RunKeys keys;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string name, value, extra;
    if (!(fields >> name) || name[0] == '#') continue;
    std::string* slot = key_slot(keys, name);
    if (!slot) {
      return invalid_argument(str("key file ", path, " line ", number, ": unknown key name (expected one of ",
                                  "server_public, server_secret, client_public, client_secret)"));
    }
    if (!(fields >> value) || (fields >> extra)) {
      return invalid_argument(str("key file ", path, " line ", number, ": expected `", name, " <40 Z85 characters>`"));
    }
    *slot = value;
  }
  for (const char* name : kKeyNames) {
    if (key_slot(keys, name)->empty()) {
      return invalid_argument(str("key file ", path, " has no ", name,
                                  " (regenerate it: the orchestrator writes it at the start of a run)"));
    }
  }
  return keys;
}

}  // namespace

Status check_curve_available() {
  if (!zmq_has("curve")) {
    return unavailable(
        "this libzmq was built without CURVE (zmq_has(\"curve\") is false): install a libzmq built with "
        "libsodium (Debian's libzmq5 is), or run the control plane with security mechanism none");
  }
  return Status();
}

Result<RunKeys> generate_run_keys() {
  RLRUN_RETURN_IF_ERROR(check_curve_available());
  RunKeys keys;
  for (auto [pub, sec] : {std::pair{&keys.server_public, &keys.server_secret},
                          std::pair{&keys.client_public, &keys.client_secret}}) {
    char public_z85[kZ85KeyChars + 1], secret_z85[kZ85KeyChars + 1];
    if (zmq_curve_keypair(public_z85, secret_z85) != 0)
      return internal_error(str("zmq_curve_keypair failed: ", zmq_strerror(zmq_errno())));
    *pub = public_z85;
    *sec = secret_z85;
  }
  return keys;
}

Result<std::string> write_run_keys(const std::string& dir) {
  RLRUN_ASSIGN_OR_RETURN(RunKeys keys, generate_run_keys());
  const std::string path = dir + "/" + kRunKeysFileName;
  const std::string text = str("# rlrun control-plane CURVE keys for one run (Z85). Secret: keep mode 0600.\n",
                               "server_public ", keys.server_public, "\nserver_secret ", keys.server_secret,
                               "\nclient_public ", keys.client_public, "\nclient_secret ", keys.client_secret, "\n");
  RLRUN_RETURN_IF_ERROR(write_file_atomic(path, text, 0600));
  log::info(str("control plane: wrote run keys to ", path, " (server key ", key_fingerprint(keys.server_public),
                ", client key ", key_fingerprint(keys.client_public), ")"));
  return path;
}

Result<RunKeys> read_run_keys(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return errno == ENOENT ? not_found(str("key file ", path, " does not exist (the orchestrator writes it into the run directory)"))
                           : io_error(str("cannot stat key file ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) return invalid_argument(str("key file ", path, " is not a regular file"));
  if (info.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return invalid_argument(str("key file ", path, " has mode ", mode,
                                 ": it holds secret keys and must not be accessible by group or others; run `chmod 600 ",
                                 path, "`"));
  }
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(path, "key file"));
  RLRUN_ASSIGN_OR_RETURN(RunKeys keys, parse_run_keys(text, path));
  const std::string where = str(" in key file ", path);
  RLRUN_RETURN_IF_ERROR(check_key_pair(keys.server_public, keys.server_secret, str("the server key pair", where)));
  RLRUN_RETURN_IF_ERROR(check_key_pair(keys.client_public, keys.client_secret, str("the client key pair", where)));
  return keys;
}

std::string key_fingerprint(std::string_view z85_public) { return std::string(z85_public.substr(0, 8)); }

Status check_key_pair(std::string_view public_z85, std::string_view secret_z85, std::string_view what) {
  RLRUN_RETURN_IF_ERROR(check_curve_available());
  if (!is_z85_key(public_z85)) return invalid_argument(str(what, ": the public key is not 40 characters of Z85"));
  if (!is_z85_key(secret_z85)) return invalid_argument(str(what, ": the secret key is not 40 characters of Z85"));
  char derived[kZ85KeyChars + 1];
  const std::string secret(secret_z85);
  if (zmq_curve_public(derived, secret.c_str()) != 0 || public_z85 != derived) {
    return invalid_argument(str(what, ": the public key ", key_fingerprint(public_z85),
                                "... does not belong to the secret key (regenerate the keys)"));
  }
  return Status();
}

SecurityOptions server_security(const RunKeys& keys) {
  SecurityOptions s;
  s.mechanism = SecurityOptions::Mechanism::kCurve;
  s.server_public = keys.server_public;
  s.server_secret = keys.server_secret;
  s.client_public = keys.client_public;
  return s;
}

SecurityOptions client_security(const RunKeys& keys) {
  SecurityOptions s;
  s.mechanism = SecurityOptions::Mechanism::kCurve;
  s.server_public = keys.server_public;
  s.client_public = keys.client_public;
  s.client_secret = keys.client_secret;
  return s;
}

SecurityOptions worker_server_security(const SecurityOptions& worker) {
  SecurityOptions s;
  s.mechanism = worker.mechanism;
  s.server_public = worker.client_public;
  s.server_secret = worker.client_secret;
  s.client_public = worker.client_public;
  return s;
}

SecurityOptions worker_client_security(const SecurityOptions& worker) {
  SecurityOptions s = worker;
  s.server_public = worker.client_public;
  s.server_secret.clear();
  return s;
}

}  // namespace rlrun
