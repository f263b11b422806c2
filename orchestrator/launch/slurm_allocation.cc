#include "orchestrator/launch/slurm_allocation.h"

#include <cctype>
#include <charconv>

#include "orchestrator/launch/spawn.h"

extern char** environ;

namespace rlrun::orchestrator {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A whole non-negative decimal number, or -1.
long parse_count(std::string_view s) {
  long v = -1;
  if (s.empty() || s.size() > 9) return -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return -1;
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

Status bad_value(std::string_view variable, std::string_view value, std::string_view expected) {
  return invalid_argument(str(variable, "=\"", value, "\": expected ", expected,
                              " (is this process inside a Slurm allocation made by salloc/sbatch?)"));
}

std::string lookup(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

EnvMap slurm_environment() {
  EnvMap env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string_view::npos && kv.substr(0, 6) == "SLURM_") env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

Result<rlrun::LauncherKind> detect_launcher(rlrun::LauncherKind configured, const EnvMap& env) {
  const bool in_allocation = !lookup(env, "SLURM_JOB_ID").empty();
  switch (configured) {
    case rlrun::LauncherKind::kLocal: return rlrun::LauncherKind::kLocal;
    case rlrun::LauncherKind::kAuto: return in_allocation ? rlrun::LauncherKind::kSlurm : rlrun::LauncherKind::kLocal;
    case rlrun::LauncherKind::kSlurm:
      if (in_allocation) return rlrun::LauncherKind::kSlurm;
      return invalid_argument(
          "launcher: slurm needs a Slurm allocation, and SLURM_JOB_ID is not set: run rlrun inside "
          "`salloc` or `sbatch scripts/rlrun.sbatch CONFIG`, or set `launcher: local`");
  }
  return internal_error("unknown launcher value");
}

Result<std::vector<int>> parse_slurm_counts(std::string_view variable, std::string_view value) {
  constexpr std::string_view kExpected = "comma-separated counts, each N or N(xR), like \"2(x3),4\"";
  std::vector<int> counts;
  if (trim(value).empty()) return bad_value(variable, value, kExpected);
  for (std::string_view part : split(trim(value), ',')) {
    long repeat = 1;
    const size_t paren = part.find('(');
    if (paren != std::string_view::npos) {
      std::string_view rep = part.substr(paren);
      if (rep.size() < 4 || rep.substr(0, 2) != "(x" || rep.back() != ')') return bad_value(variable, value, kExpected);
      repeat = parse_count(rep.substr(2, rep.size() - 3));
      part = part.substr(0, paren);
    }
    const long n = parse_count(part);
    if (n < 0 || repeat <= 0 || repeat > 100000) return bad_value(variable, value, kExpected);
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(n));
  }
  return counts;
}

Result<int> parse_gpus_per_node(std::string_view variable, std::string_view value) {
  constexpr std::string_view kExpected = "a GPU count per node like \"4\", \"gpu:4\" or \"a100:4\"";
  int total = 0;
  if (trim(value).empty()) return bad_value(variable, value, kExpected);
  for (std::string_view entry : split(trim(value), ',')) {
    std::vector<std::string_view> fields = split(entry, ':');  // [gpu:][type:]count
    const long n = parse_count(fields.back());
    if (n < 0 || fields.size() > 3) return bad_value(variable, value, kExpected);
    for (size_t i = 0; i + 1 < fields.size(); ++i) {
      if (fields[i].empty()) return bad_value(variable, value, kExpected);
    }
    total += static_cast<int>(n);
  }
  return total;
}

Result<int> parse_gpu_index_list(std::string_view variable, std::string_view value) {
  constexpr std::string_view kExpected = "GPU indices like \"0,1,2,3\" or \"0-3\"";
  int count = 0;
  if (trim(value).empty()) return bad_value(variable, value, kExpected);
  for (std::string_view part : split(trim(value), ',')) {
    const size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      if (parse_count(part) < 0) return bad_value(variable, value, kExpected);
      ++count;
      continue;
    }
    const long lo = parse_count(part.substr(0, dash)), hi = parse_count(part.substr(dash + 1));
    if (lo < 0 || hi < lo) return bad_value(variable, value, kExpected);
    count += static_cast<int>(hi - lo + 1);
  }
  return count;
}

Result<std::vector<std::pair<std::string, int>>> parse_job_detail_gres(std::string_view text) {
  std::vector<std::pair<std::string, int>> out;
  for (std::string_view line : split(text, '\n')) {
    line = trim(line);
    if (line.substr(0, 6) != "Nodes=" || line.find("CPU_IDs=") == std::string_view::npos) continue;
    std::string_view nodes = line.substr(6, line.find(' ') - 6);
    int gpus = 0;
    const size_t g = line.find(" GRES=");
    if (g != std::string_view::npos) {
      std::string_view gres = line.substr(g + 6);
      gres = gres.substr(0, gres.find(' '));
      // entries "gpu[:type]:N(IDX:...)" separated by commas outside parentheses
      int depth = 0;
      size_t start = 0;
      for (size_t i = 0; i <= gres.size(); ++i) {
        if (i < gres.size() && gres[i] == '(') ++depth;
        if (i < gres.size() && gres[i] == ')') --depth;
        if (i < gres.size() && (gres[i] != ',' || depth > 0)) continue;
        std::string_view entry = gres.substr(start, i - start);
        start = i + 1;
        entry = entry.substr(0, entry.find('('));
        if (entry.substr(0, 3) != "gpu") continue;
        const long n = parse_count(entry.substr(entry.rfind(':') + 1));
        if (n < 0) return protocol_error(str("scontrol show job -d: cannot read the GPU count of \"", line, "\""));
        gpus += static_cast<int>(n);
      }
    }
    out.emplace_back(std::string(nodes), gpus);
  }
  return out;
}

Result<std::string> parse_node_address(std::string_view node, std::string_view text) {
  const size_t at = text.find("NodeAddr=");
  if (at == std::string_view::npos) {
    return protocol_error(str("scontrol show node ", node, ": no NodeAddr in its output"));
  }
  std::string_view addr = text.substr(at + 9);
  addr = addr.substr(0, addr.find_first_of(" \t\n"));
  if (addr.empty()) return protocol_error(str("scontrol show node ", node, ": empty NodeAddr"));
  return std::string(addr);
}

namespace {

// GPUs on each of `hosts` (nodes of job `job_id`), from the first source that says.
Result<std::vector<int>> gpus_per_node(const EnvMap& env, const std::string& job_id,
                                       const std::vector<std::string>& hosts, SlurmQueries& queries) {
  const size_t n = hosts.size();
  if (std::string v = lookup(env, "SLURM_GPUS_PER_NODE"); !v.empty()) {
    RLRUN_ASSIGN_OR_RETURN(int gpus, parse_gpus_per_node("SLURM_GPUS_PER_NODE", v));
    return std::vector<int>(n, gpus);
  }
  if (std::string v = lookup(env, "SLURM_JOB_GPUS"); !v.empty()) {
    RLRUN_ASSIGN_OR_RETURN(int gpus, parse_gpu_index_list("SLURM_JOB_GPUS", v));
    return std::vector<int>(n, gpus);  // describes the first node; Slurm allocates GPUs alike per node
  }
  if (std::string v = lookup(env, "SLURM_GPUS_ON_NODE"); !v.empty()) {
    const long gpus = parse_count(trim(v));
    if (gpus < 0) return bad_value("SLURM_GPUS_ON_NODE", v, "a GPU count like \"4\"");
    return std::vector<int>(n, static_cast<int>(gpus));
  }
  // `salloc --gres=gpu:N` exports nothing about GPUs: ask the controller.
  RLRUN_ASSIGN_OR_RETURN(std::string details, queries.job_details(job_id));
  RLRUN_ASSIGN_OR_RETURN(auto groups, parse_job_detail_gres(details));
  std::map<std::string, int> by_host;
  for (const auto& [nodelist, gpus] : groups) {
    RLRUN_ASSIGN_OR_RETURN(std::vector<std::string> names, queries.hostnames(nodelist));
    for (const std::string& name : names) by_host[name] = gpus;
  }
  std::vector<int> out;
  for (const std::string& h : hosts) out.push_back(by_host.count(h) ? by_host[h] : 0);
  return out;
}

Result<std::vector<int>> cpus_per_node(const EnvMap& env, size_t n) {
  if (std::string v = lookup(env, "SLURM_JOB_CPUS_PER_NODE"); !v.empty()) {
    RLRUN_ASSIGN_OR_RETURN(std::vector<int> cpus, parse_slurm_counts("SLURM_JOB_CPUS_PER_NODE", v));
    if (cpus.size() != n) {
      return invalid_argument(str("SLURM_JOB_CPUS_PER_NODE=\"", v, "\" describes ", cpus.size(),
                                  " node(s) but SLURM_JOB_NODELIST names ", n));
    }
    return cpus;
  }
  if (std::string v = lookup(env, "SLURM_CPUS_ON_NODE"); !v.empty()) {
    const long cpus = parse_count(trim(v));
    if (cpus <= 0) return bad_value("SLURM_CPUS_ON_NODE", v, "a positive CPU count");
    return std::vector<int>(n, static_cast<int>(cpus));
  }
  return std::vector<int>(n, 1);
}

}  // namespace

Result<SlurmAllocation> read_slurm_allocation(const EnvMap& env, SlurmQueries& queries) {
  SlurmAllocation a;
  a.job_id = std::string(trim(lookup(env, "SLURM_JOB_ID")));
  if (a.job_id.empty()) return invalid_argument("SLURM_JOB_ID is not set: this process is not inside a Slurm allocation");
  if (a.job_id.find_first_not_of("0123456789") != std::string::npos) {
    return bad_value("SLURM_JOB_ID", a.job_id, "a job id like \"1234\"");
  }
  const std::string nodelist = std::string(trim(lookup(env, "SLURM_JOB_NODELIST")));
  if (nodelist.empty()) return invalid_argument("SLURM_JOB_NODELIST is not set although SLURM_JOB_ID is");
  auto hosts = queries.hostnames(nodelist);
  if (!hosts.ok()) return hosts.status().with_context(str("expanding SLURM_JOB_NODELIST=\"", nodelist, "\""));
  if (hosts->empty()) return bad_value("SLURM_JOB_NODELIST", nodelist, "at least one node");
  RLRUN_ASSIGN_OR_RETURN(std::vector<int> cpus, cpus_per_node(env, hosts->size()));
  RLRUN_ASSIGN_OR_RETURN(std::vector<int> gpus, gpus_per_node(env, a.job_id, *hosts, queries));
  for (size_t i = 0; i < hosts->size(); ++i) {
    RLRUN_ASSIGN_OR_RETURN(std::string address, queries.node_address((*hosts)[i]));
    a.nodes.push_back(NodeResources{(*hosts)[i], address, gpus[i], cpus[i]});
  }
  return a;
}

namespace {

class ScontrolQueries : public SlurmQueries {
 public:
  Result<std::vector<std::string>> hostnames(const std::string& nodelist) override {
    RLRUN_ASSIGN_OR_RETURN(std::string text, run_and_capture({"scontrol", "show", "hostnames", nodelist}));
    std::vector<std::string> names;
    for (std::string_view line : split(text, '\n')) {
      if (!trim(line).empty()) names.emplace_back(trim(line));
    }
    return names;
  }
  Result<std::string> node_address(const std::string& node) override {
    RLRUN_ASSIGN_OR_RETURN(std::string text, run_and_capture({"scontrol", "show", "node", node}));
    return parse_node_address(node, text);
  }
  Result<std::string> job_details(const std::string& job_id) override {
    return run_and_capture({"scontrol", "-d", "show", "job", job_id});
  }
};

}  // namespace

std::unique_ptr<SlurmQueries> make_scontrol_queries() { return std::make_unique<ScontrolQueries>(); }

}  // namespace rlrun::orchestrator
