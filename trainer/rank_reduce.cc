#include "trainer/rank_reduce.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace rlrun::trainer {

int comm_size(const engine::Communicator* comm) { return comm == nullptr ? 1 : comm->size(); }
int comm_rank(const engine::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }

Result<std::vector<double>> all_gather_doubles(engine::Communicator* comm, std::span<const double> values) {
  std::vector<double> out(values.size() * static_cast<size_t>(comm_size(comm)));
  if (comm == nullptr || comm->size() == 1) {
    std::copy(values.begin(), values.end(), out.begin());
    return out;
  }
  RLRUN_RETURN_IF_ERROR(comm->all_gather(values.data(), out.data(), values.size() * sizeof(double),
                                         engine::CommDType::kU8));
  return out;
}

Status all_reduce_doubles(engine::Communicator* comm, std::span<double> values) {
  if (comm == nullptr || comm->size() == 1) return Status();
  RLRUN_ASSIGN_OR_RETURN(std::vector<double> all, all_gather_doubles(comm, values));
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int r = 0; r < comm->size(); ++r) sum += all[static_cast<size_t>(r) * n + i];
    values[i] = sum;
  }
  return Status();
}

Status agree_with_root(engine::Communicator* comm, const Status& root_status) {
  if (comm == nullptr || comm->size() == 1) return root_status;
  int32_t head[2] = {static_cast<int32_t>(root_status.code()), static_cast<int32_t>(root_status.message().size())};
  RLRUN_RETURN_IF_ERROR(comm->broadcast(head, 2, engine::CommDType::kI32, 0));
  std::string message = root_status.message();
  message.resize(static_cast<size_t>(std::max(head[1], 0)));
  if (!message.empty()) RLRUN_RETURN_IF_ERROR(comm->broadcast(message.data(), message.size(), engine::CommDType::kU8, 0));
  return head[0] == 0 ? Status() : Status(static_cast<StatusCode>(head[0]), message);
}

}  // namespace rlrun::trainer
