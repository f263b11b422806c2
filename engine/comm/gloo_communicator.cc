// Gloo collectives over TCP for host buffers. Gloo reports failures (a dead peer, a timeout) by
// throwing gloo::Exception; every call here catches it and returns a Status.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "common/observe/log.h"
#include "engine/comm/communicator.h"

namespace rlrun::engine {

size_t comm_dtype_size(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32: return 4;
    case CommDType::kI32: return 4;
    case CommDType::kU8: return 1;
  }
  return 1;
}

namespace {

class InProcessStore : public RendezvousStore {
 public:
  Status set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return Status();
  }
  Result<std::vector<char>> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return timeout_error(str("rendezvous: key `", key, "` not set within ", timeout.count(), " ms"));
    }
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> values_;
};

// Adapts our RendezvousStore to Gloo's interface, which reports failure by throwing.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<RendezvousStore> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = store_->set(key, data);
    if (!s.ok()) throw gloo::IoException(s.message());
  }
  std::vector<char> get(const std::string& key) override {
    auto r = store_->get(key, timeout_);
    if (!r.ok()) throw gloo::IoException(r.status().message());
    return std::move(r).value();
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      auto r = store_->get(key, timeout);
      if (!r.ok()) throw gloo::IoException(r.status().message());
    }
  }

 private:
  std::shared_ptr<RendezvousStore> store_;
  std::chrono::milliseconds timeout_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::string name)
      : context_(std::move(context)), name_(std::move(name)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  Status all_reduce_sum(void* data, size_t count, CommDType dtype) override {
    if (dtype == CommDType::kU8) return invalid_argument("all_reduce_sum: raw bytes cannot be summed");
    return guarded("all_reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setTag(next_tag());
      if (dtype == CommDType::kF32) {
        opts.setOutput(static_cast<float*>(data), count);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      } else {
        opts.setOutput(static_cast<int32_t*>(data), count);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<int32_t>));
      }
      gloo::allreduce(opts);
    });
  }

  Status broadcast(void* data, size_t count, CommDType dtype, int root) override {
    if (root < 0 || root >= size()) return invalid_argument(str("broadcast: root ", root, " not in group"));
    return guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(next_tag());
      opts.setRoot(root);
      opts.setOutput(static_cast<uint8_t*>(data), count * comm_dtype_size(dtype));
      gloo::broadcast(opts);
    });
  }

  // Gloo's halving-doubling reduce-scatter leaves the shards where its block schedule puts them,
  // not at rank * count for every group size, so this sums the whole buffer with an all-reduce
  // and keeps this rank's slice: twice the bytes of a true reduce-scatter, correct for any size.
  Status reduce_scatter_sum(const void* in, void* out, size_t count_per_rank, CommDType dtype) override {
    if (dtype != CommDType::kF32) return invalid_argument("reduce_scatter_sum: only f32 is supported on CPU");
    const size_t total = count_per_rank * static_cast<size_t>(size());
    scratch_.assign(static_cast<const float*>(in), static_cast<const float*>(in) + total);
    RLRUN_RETURN_IF_ERROR(all_reduce_sum(scratch_.data(), total, CommDType::kF32));
    std::memcpy(out, scratch_.data() + count_per_rank * rank(), count_per_rank * sizeof(float));
    scratch_.clear();
    scratch_.shrink_to_fit();  // do not hold a gradient-sized buffer between steps
    return Status();
  }

  Status all_gather(const void* in, void* out, size_t count_per_rank, CommDType dtype) override {
    return guarded("all_gather", [&] {
      const size_t bytes = count_per_rank * comm_dtype_size(dtype);
      gloo::AllgatherOptions opts(context_);
      opts.setTag(next_tag());
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes);
      opts.setOutput(static_cast<uint8_t*>(out), bytes * size());
      gloo::allgather(opts);
    });
  }

  Status barrier() override {
    return guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      gloo::barrier(opts);
    });
  }

 private:
  template <class Fn>
  Status guarded(const char* what, Fn&& fn) {
    try {
      fn();
      return Status();
    } catch (const std::exception& e) {
      return unavailable(str("group `", name_, "` rank ", rank(), ": ", what, " failed: ", e.what(),
                             " (a peer died or timed out)"));
    }
  }
  uint32_t next_tag() { return tag_++; }

  std::shared_ptr<gloo::Context> context_;
  std::string name_;
  uint32_t tag_ = 1;
  std::vector<float> scratch_;
};

}  // namespace

std::shared_ptr<RendezvousStore> make_in_process_store() { return std::make_shared<InProcessStore>(); }

Result<std::unique_ptr<Communicator>> make_gloo_communicator(std::shared_ptr<RendezvousStore> store,
                                                             const GroupOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return invalid_argument(str("group `", options.name, "`: rank ", options.rank, " of size ", options.size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.interface_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto adapter = std::make_shared<GlooStoreAdapter>(std::move(store), options.timeout);
    gloo::rendezvous::PrefixStore prefixed(options.name, *adapter);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(prefixed, device);
    if (options.collective_timeout.count() > 0) context->setTimeout(options.collective_timeout);  // read per op
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(context), options.name));
  } catch (const std::exception& e) {
    return unavailable(str("group `", options.name, "` rank ", options.rank, "/", options.size,
                           ": rendezvous failed: ", e.what()));
  }
}

}  // namespace rlrun::engine
