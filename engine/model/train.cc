// model/train.cc - packed training forward/backward with optional gradient checkpointing.
#include <algorithm>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/model/layer.h"
#include "engine/model/model.h"

namespace rlrun::engine {

// What backward needs from forward. Without checkpointing `acts` holds one LayerActs per layer;
// with it, `acts` is empty and backward recomputes each layer into `recompute`.
struct Model::TrainState {
  int64_t n = 0;
  bool for_backward = false, checkpointing = false;
  Tensor ids, positions, targets;              // (N) i32
  Tensor embed_rows, embed_ids;                // pad_token_id present: the other rows and their ids (M) i32
  bool skip_embedding_grad = false;            // every token is the pad token
  PackedAttention attention;                   // segments, and the expansion of shared prefixes
  std::vector<Tensor> xs;                      // residual stream: xs[l] is layer l's input (N, H)
  std::vector<LayerActs> acts;
  LayerActs recompute;                         // checkpointing: one layer's activations
  LayerGradScratch grad;                       // backward scratch shared by the layers
  bool lora = false;                           // forward ran with the adapters
  LayerGrads norm_sink;                        // frozen base: where the norms' gradients go
  Tensor final_norm_sink;
  Tensor rstd_f, hf;          // final norm: (N) f32, (N, H)
  // The head runs only over the M tokens with a target (f32 backends; all N otherwise):
  int64_t m = 0;
  Tensor head_rows;           // (M) i32 rows of those tokens, undefined when M = N
  Tensor head_hf, head_targets;  // (M, H), (M) i32: their final-norm outputs and targets
  Tensor logits;              // (M, V), kept only when one chunk covers every row
  Tensor lse, entropy;        // (M) f32 from the fused log-softmax
  int64_t saved_bytes = 0;
};

Model::Model(Backend& backend, const ModelConfig& config, ModelOptions options)
    : weights_(backend, config, options.weight_storage), ropes_(make_layer_ropes(backend, config)), options_(options) {}

Model::~Model() = default;

// validate_model_config() is defined once, in model/config.cc (declared in model.h and hf_config.h).

Status Model::attach_lora(LoraWeights* lora) {
  if (lora == nullptr) {
    lora_ = nullptr;
    return {};
  }
  if (backend().compute_dtype() != DType::kF32)
    return invalid_argument(str("LoRA (lora_rank > 0) needs an f32 compute dtype; the backend computes in ",
                                dtype_name(backend().compute_dtype())));
  if (&lora->backend() != &backend()) return invalid_argument("LoRA adapters live on another backend than the model");
  const std::vector<ParamInfo> expected = lora_layout(config(), lora->config());
  if (expected.size() != lora->params().size()) return invalid_argument("LoRA adapters made for another model shape");
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected[i].shape != lora->params()[i].shape)
      return invalid_argument(str("LoRA adapter ", expected[i].name, " has shape ", lora->params()[i].shape.str(),
                                  ", the model needs ", expected[i].shape.str()));
  lora_ = lora;
  return {};
}

LayerLora Model::layer_lora(int64_t l, bool with_grads) const {
  if (lora_ == nullptr || !lora_enabled_) return {};
  return {&lora_->layer(l), with_grads ? &lora_->layer_grad(l) : nullptr, static_cast<float>(lora_->config().scale())};
}

Result<std::unique_ptr<Model>> Model::create(Backend& backend, const ModelConfig& config, ModelOptions options) {
  RLRUN_RETURN_IF_ERROR(validate_model_config(config));
  RLRUN_RETURN_IF_ERROR(check_implemented(config));
  if (options.logits_chunk_elements <= 0) return invalid_argument("logits_chunk_elements must be > 0");
  if (options.weight_storage != WeightStorage::kF32 && backend.compute_dtype() != DType::kF32)
    return invalid_argument(str("bf16 weight matrices (base_weights_dtype or compute_dtype: bf16) beside f32 ops need a ",
                                "backend that computes in f32; ", backend.name(), " computes in ",
                                dtype_name(backend.compute_dtype())));
  return std::unique_ptr<Model>(new Model(backend, config, options));
}

Status Model::validate(const PackedBatch& b) const {
  const size_t n = b.tokens.size();
  if (n == 0) return invalid_argument("packed batch is empty");
  if (b.positions.size() != n || b.targets.size() != n)
    return invalid_argument(str("packed batch: ", n, " tokens but ", b.positions.size(), " positions and ",
                                b.targets.size(), " targets"));
  if (b.cu_seqlens.size() < 2 || b.cu_seqlens.front() != 0 || static_cast<size_t>(b.cu_seqlens.back()) != n)
    return invalid_argument(str("packed batch: cu_seqlens must run from 0 to the token count ", n));
  for (size_t s = 1; s < b.cu_seqlens.size(); ++s)
    if (b.cu_seqlens[s] <= b.cu_seqlens[s - 1])
      return invalid_argument(str("packed batch: cu_seqlens must increase strictly (sequence ", s - 1, " is empty)"));
  const int64_t vocab = config().vocab_size;
  for (size_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= vocab)
      return invalid_argument(str("packed batch: token ", i, " has id ", b.tokens[i], " outside the vocabulary [0, ",
                                  vocab, ")"));
    if (b.targets[i] >= vocab)
      return invalid_argument(str("packed batch: target ", i, " is ", b.targets[i], ", outside the vocabulary"));
    if (b.positions[i] < 0) return invalid_argument(str("packed batch: position ", i, " is negative"));
    if (b.positions[i] >= config().max_position && config().rope_scaling.type == "dynamic")
      return invalid_argument(str("packed batch: position ", b.positions[i], " is past max_position_embeddings ",
                                  config().max_position, ", where dynamic RoPE would rescale (not implemented)"));
  }
  if (b.prefix_of.empty()) return {};
  const size_t segments = b.cu_seqlens.size() - 1;
  if (b.prefix_of.size() != segments)
    return invalid_argument(str("packed batch: prefix_of has ", b.prefix_of.size(), " entries for ", segments, " segments"));
  if (backend().compute_dtype() != DType::kF32)
    return invalid_argument("packed batch: shared prefixes (prefix_of) need an f32 compute dtype; expand the batch");
  for (size_t s = 0; s < segments; ++s) {
    const int32_t p = b.prefix_of[s];
    if (p < 0) continue;
    if (static_cast<size_t>(p) >= s)
      return invalid_argument(str("packed batch: segment ", s, " continues segment ", p, ", which is not an earlier segment"));
    if (b.positions[b.cu_seqlens[s]] != b.positions[b.cu_seqlens[p + 1] - 1] + 1)
      return invalid_argument(str("packed batch: segment ", s, " continues segment ", p, " but its positions start at ",
                                  b.positions[b.cu_seqlens[s]], ", not after the prefix's"));
  }
  return {};
}

namespace {

// The training attention's layout of `b` (validated): with shared prefixes, the expansion in
// which each continuing segment is preceded by a copy of its prefixes, outermost first (layer.h).
PackedAttention packed_attention(Backend& backend, const PackedBatch& b) {
  PackedAttention a;
  const size_t segments = b.cu_seqlens.size() - 1;
  for (size_t s = 0; s < segments; ++s) a.max_seqlen = std::max<int64_t>(a.max_seqlen, b.cu_seqlens[s + 1] - b.cu_seqlens[s]);
  a.cu_seqlens = from_host_i32(backend, {static_cast<int64_t>(b.cu_seqlens.size())}, b.cu_seqlens);
  const bool shared = std::any_of(b.prefix_of.begin(), b.prefix_of.end(), [](int32_t p) { return p >= 0; });
  if (!shared) return a;
  std::vector<bool> has_continuation(segments, false);
  for (size_t s = 0; s < segments; ++s)
    if (b.prefix_of[s] >= 0) has_continuation[b.prefix_of[s]] = true;
  std::vector<int32_t> gather, pick(b.tokens.size(), -1), cu = {0}, q_begin;
  int32_t keys_only = 0;  // the current expanded segment's leading rows picked in an earlier one
  auto append = [&](size_t s) {  // segment s's rows, picked as its outputs unless already picked
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
      if (pick[t] < 0)
        pick[t] = static_cast<int32_t>(gather.size());
      else if (static_cast<int32_t>(gather.size()) - cu.back() == keys_only)  // prefixes come first
        ++keys_only;
      gather.push_back(t);
    }
  };
  std::vector<size_t> chain;
  for (size_t s = 0; s < segments; ++s) {
    if (has_continuation[s]) continue;  // a prefix comes with each of its continuations
    chain.clear();  // s and the prefixes it continues, outermost last
    for (int32_t p = static_cast<int32_t>(s); p >= 0; p = b.prefix_of[static_cast<size_t>(p)]) chain.push_back(static_cast<size_t>(p));
    keys_only = 0;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) append(*it);
    a.max_expanded = std::max<int64_t>(a.max_expanded, static_cast<int64_t>(gather.size()) - cu.back());
    q_begin.push_back(keys_only);
    cu.push_back(static_cast<int32_t>(gather.size()));
  }
  a.expanded = true;
  a.n_expanded = static_cast<int64_t>(gather.size());
  a.gather = from_host_i32(backend, {a.n_expanded}, gather);
  a.pick = from_host_i32(backend, {static_cast<int64_t>(pick.size())}, pick);
  a.cu_expanded = from_host_i32(backend, {static_cast<int64_t>(cu.size())}, cu);
  a.q_begin = from_host_i32(backend, {static_cast<int64_t>(q_begin.size())}, q_begin);
  return a;
}

}  // namespace

Result<ForwardOutput> Model::forward(const PackedBatch& batch, bool for_backward) {
  RLRUN_RETURN_IF_ERROR(validate(batch));
  Backend& b = backend();
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(batch.tokens.size()), L = c.num_layers;
  state_ = std::make_unique<TrainState>();
  TrainState& st = *state_;
  st.n = n;
  st.for_backward = for_backward;
  st.checkpointing = options_.gradient_checkpointing;
  st.lora = lora_ != nullptr && lora_enabled_;
  st.attention = packed_attention(b, batch);
  std::vector<int32_t> head_rows, head_targets;  // tokens with a target: the only ones the head must score
  for (int64_t i = 0; i < n; ++i)
    if (batch.targets[i] >= 0) head_rows.push_back(static_cast<int32_t>(i)), head_targets.push_back(batch.targets[i]);
  st.m = static_cast<int64_t>(head_rows.size());
  if (st.m < n && b.compute_dtype() == DType::kF32) {
    if (st.m > 0) {
      st.head_rows = from_host_i32(b, {st.m}, head_rows);
      st.head_targets = from_host_i32(b, {st.m}, head_targets);
    }
  } else {
    st.m = n;
  }
  st.ids = from_host_i32(b, {n}, batch.tokens);
  st.positions = from_host_i32(b, {n}, batch.positions);
  st.targets = from_host_i32(b, {n}, batch.targets);

  // Without backward only two residual buffers are needed; they alternate.
  const bool keep_all = for_backward && !st.checkpointing;
  st.xs.resize(for_backward ? L + 1 : 2);
  for (Tensor& x : st.xs) x = b.uninitialized({n, c.hidden_size}, b.compute_dtype());
  b.embedding_forward(st.xs[0], weights_.embed_tokens(), st.ids);
  if (c.embedding_scale != 1.0) b.scale(st.xs[0], static_cast<float>(c.embedding_scale));
  if (c.pad_token_id >= 0) {  // torch's padding_idx: the pad token's lookups add nothing to its row's gradient
    std::vector<int32_t> rows, ids;
    for (int64_t i = 0; i < n; ++i)
      if (batch.tokens[i] != c.pad_token_id) rows.push_back(static_cast<int32_t>(i)), ids.push_back(batch.tokens[i]);
    if (static_cast<int64_t>(rows.size()) < n) {
      st.embed_rows = rows.empty() ? Tensor() : from_host_i32(b, {static_cast<int64_t>(rows.size())}, rows);
      st.embed_ids = rows.empty() ? Tensor() : from_host_i32(b, {static_cast<int64_t>(ids.size())}, ids);
      st.skip_embedding_grad = rows.empty();
    }
  }
  LayerActs scratch;
  if (!keep_all) scratch = alloc_layer_acts(b, c, n, /*save_stats=*/false);
  for (int64_t l = 0; l < L; ++l) {
    if (keep_all) st.acts.push_back(alloc_layer_acts(b, c, n, true));
    LayerActs& a = keep_all ? st.acts.back() : scratch;
    const Tensor& x_in = st.xs[for_backward ? l : l % 2];
    const Tensor& x_out = st.xs[for_backward ? l + 1 : (l + 1) % 2];
    const LayerLora lora = layer_lora(l, false);
    layer_qkv_forward(b, c, weights_.layer(l), ropes_[l], x_in, st.positions, a, lora);
    packed_attention_forward(b, c, st.attention, ropes_[l].window, a);
    layer_post_attention_forward(b, c, weights_.layer(l), x_in, a, x_out, lora);
  }
  if (!for_backward) st.xs[0] = st.xs[L % 2];  // the head reads xs.back()
  if (!for_backward) st.xs.resize(1);
  scratch = LayerActs{};

  ForwardOutput out{b.zeros({n}, DType::kF32), b.zeros({n}, DType::kF32)};
  head_forward(st, out, for_backward);
  if (!for_backward) {
    state_.reset();
    return out;
  }
  st.saved_bytes = static_cast<int64_t>(st.xs.size() * st.xs[0].nbytes() + st.hf.nbytes() + st.rstd_f.nbytes());
  for (const Tensor* t : {&st.lse, &st.logits})
    if (t->defined()) st.saved_bytes += static_cast<int64_t>(t->nbytes());
  if (st.m < st.n && st.m > 0) st.saved_bytes += static_cast<int64_t>(st.head_hf.nbytes() + st.head_targets.nbytes());
  for (const LayerActs& a : st.acts) st.saved_bytes += bytes_of(a);
  return out;
}

namespace {

Tensor column(const Tensor& t) { return t.view({t.numel(), 1}); }

}  // namespace

// Only the M tokens with a target need logits: their final-norm rows are gathered (head_hf), scored
// chunk by chunk, and their log-probs and entropies scattered back into the (N) outputs (zero
// elsewhere). With M = N the gather and scatter are skipped.
void Model::head_forward(TrainState& st, const ForwardOutput& out, bool for_backward) {
  Backend& b = backend();
  const ModelConfig& c = config();
  const int64_t n = st.n, m = st.m, v = c.vocab_size;
  st.rstd_f = for_backward ? b.uninitialized({n}, DType::kF32) : Tensor();
  st.hf = b.uninitialized({n, c.hidden_size}, b.compute_dtype());
  b.rmsnorm_forward(st.hf, st.rstd_f, st.xs.back(), weights_.final_norm(), static_cast<float>(c.rms_norm_eps),
                    static_cast<float>(c.norm_weight_offset));
  if (m == 0) return;  // nothing to score: log-probs and entropies stay 0
  const bool compact = m < n;
  if (compact) {
    st.head_hf = b.uninitialized({m, c.hidden_size}, b.compute_dtype());
    b.embedding_forward(st.head_hf, st.hf, st.head_rows);
  } else {
    st.head_hf = st.hf;
    st.head_targets = st.targets;
  }
  st.lse = b.uninitialized({m}, DType::kF32);
  st.entropy = compact ? b.uninitialized({m}, DType::kF32) : out.entropy;
  const Tensor logprobs = compact ? b.uninitialized({m}, DType::kF32) : out.logprobs;
  const int64_t chunk = std::clamp<int64_t>(options_.logits_chunk_elements / v, 1, m);
  Tensor logits = b.uninitialized({chunk, v}, b.compute_dtype());
  for (int64_t c0 = 0; c0 < m; c0 += chunk) {
    const int64_t c1 = std::min(m, c0 + chunk);
    const Tensor lg = logits.rows(0, c1 - c0);
    b.matmul(lg, st.head_hf.rows(c0, c1), weights_.lm_head(), false, true);
    b.logprob_forward(logprobs.rows(c0, c1), st.entropy.rows(c0, c1), st.lse.rows(c0, c1), lg,
                      st.head_targets.rows(c0, c1));
  }
  if (compact) {  // into the zeroed (N) outputs
    b.embedding_backward(column(out.logprobs), column(logprobs), st.head_rows);
    b.embedding_backward(column(out.entropy), column(st.entropy), st.head_rows);
  }
  if (for_backward && chunk == m) st.logits = logits;  // backward need not recompute them
}

void Model::head_backward(TrainState& st, const Tensor& dlogprob, const Tensor& dentropy, const Tensor& dx) {
  Backend& b = backend();
  const ModelConfig& c = config();
  const int64_t n = st.n, m = st.m, v = c.vocab_size;
  Tensor dhf = b.zeros({n, c.hidden_size}, b.compute_dtype());
  if (m > 0) {
    const bool compact = m < n;
    Tensor dlp = dlogprob, dent = dentropy, dhead = dhf;
    if (compact) {  // the (M) rows' gradients, gathered
      dlp = b.uninitialized({m}, DType::kF32);
      b.embedding_forward(column(dlp), column(dlogprob), st.head_rows);
      if (dentropy.defined()) {
        dent = b.uninitialized({m}, DType::kF32);
        b.embedding_forward(column(dent), column(dentropy), st.head_rows);
      }
      dhead = b.uninitialized({m, c.hidden_size}, b.compute_dtype());
    }
    const int64_t chunk = std::clamp<int64_t>(options_.logits_chunk_elements / v, 1, m);
    Tensor logits = st.logits.defined() ? st.logits : b.uninitialized({chunk, v}, b.compute_dtype());
    for (int64_t c0 = 0; c0 < m; c0 += chunk) {
      const int64_t c1 = std::min(m, c0 + chunk);
      const Tensor lg = logits.rows(0, c1 - c0);
      const Tensor hf = st.head_hf.rows(c0, c1);
      if (!st.logits.defined()) b.matmul(lg, hf, weights_.lm_head(), false, true);  // recompute
      b.logprob_backward(lg, lg, st.head_targets.rows(c0, c1), st.lse.rows(c0, c1), st.entropy.rows(c0, c1),
                         dlp.rows(c0, c1), dent.defined() ? dent.rows(c0, c1) : Tensor());
      if (!base_frozen()) b.matmul(weights_.grad_lm_head(), lg, hf, true, false, 1.0f, 1.0f);  // dW += dlogits^T hf
      b.matmul(dhead.rows(c0, c1), lg, weights_.lm_head(), false, false);   // dhf = dlogits W
    }
    if (compact) b.embedding_backward(dhf, dhead, st.head_rows);  // into the zeroed (N, H)
  }
  st.logits = Tensor();
  b.rmsnorm_backward(dx, base_frozen() ? st.final_norm_sink : weights_.grad_final_norm(), dhf, st.xs.back(),
                     weights_.final_norm(), st.rstd_f,
                     static_cast<float>(c.norm_weight_offset));
}

void Model::layer_backward_at(TrainState& st, int64_t l, const Tensor& dx) {
  Backend& b = backend();
  const ModelConfig& c = config();
  LayerActs* a = nullptr;
  const LayerLora lora = st.lora ? layer_lora(l, true) : LayerLora{};
  if (st.checkpointing) {
    // Recompute layer l from its saved input. xs[l + 1] is overwritten with the same values it
    // held; its gradient is already in dx, so nothing reads it again.
    if (!st.recompute.h1.defined()) st.recompute = alloc_layer_acts(b, c, st.n, true);
    a = &st.recompute;
    layer_qkv_forward(b, c, weights_.layer(l), ropes_[l], st.xs[l], st.positions, *a, lora);
    packed_attention_forward(b, c, st.attention, ropes_[l].window, *a);
    layer_post_attention_forward(b, c, weights_.layer(l), st.xs[l], *a, st.xs[l + 1], lora);
  } else {
    a = &st.acts[l];
  }
  layer_backward(b, c, weights_.layer(l), base_frozen() ? st.norm_sink : weights_.layer_grad(l), ropes_[l], st.xs[l],
                 st.positions, st.attention, *a, st.grad, dx, lora);
  if (!st.checkpointing) st.acts[l] = LayerActs{};  // free as we go
}

void Model::backward(const Tensor& dlogprob, const Tensor& dentropy) {
  RLRUN_CHECK(state_ && state_->for_backward, "Model::backward without a forward(for_backward = true) before it");
  TrainState& st = *state_;
  Backend& b = backend();
  const ModelConfig& c = config();
  RLRUN_CHECK(dlogprob.defined() && dlogprob.numel() == st.n, "backward: dlogprob must be (N) = " +
                                                                  std::to_string(st.n) + ", got " + dlogprob.str());
  RLRUN_CHECK(!dentropy.defined() || dentropy.numel() == st.n, "backward: dentropy is " + dentropy.str());
  RLRUN_CHECK(!st.lora || lora_->has_grads(), "Model::backward: the LoRA grad buffer is released");
  if (base_frozen()) {
    st.norm_sink = alloc_norm_grad_sink(b, c);
    st.final_norm_sink = b.zeros({c.hidden_size}, DType::kF32);
  }
  Tensor dx = b.zeros({st.n, c.hidden_size}, b.compute_dtype());
  head_backward(st, dlogprob.view({st.n}), dentropy.defined() ? dentropy.view({st.n}) : Tensor(), dx);
  st.grad = alloc_layer_grad_scratch(b, c, st.n);
  for (int64_t l = c.num_layers - 1; l >= 0; --l) layer_backward_at(st, l, dx);
  if (base_frozen()) {  // the embedding table is frozen: d(x_in) of layer 0 goes nowhere
    state_.reset();
    return;
  }
  if (c.embedding_scale != 1.0) b.scale(dx, static_cast<float>(c.embedding_scale));
  if (st.embed_rows.defined()) {  // only the non-pad rows' gradients reach the table
    Tensor kept = b.uninitialized({st.embed_rows.numel(), c.hidden_size}, b.compute_dtype());
    b.embedding_forward(kept, dx, st.embed_rows);
    b.embedding_backward(weights_.grad_embed_tokens(), kept, st.embed_ids);
  } else if (!st.skip_embedding_grad) {
    b.embedding_backward(weights_.grad_embed_tokens(), dx, st.ids);
  }
  state_.reset();
}

int64_t estimate_saved_activation_bytes(const ModelConfig& c, int64_t n, DType compute, bool checkpointing,
                                        int64_t logits_chunk_elements, int64_t scored) {
  const int64_t dt = static_cast<int64_t>(dtype_size(compute));
  const int64_t m = scored < 0 || compute != DType::kF32 ? n : std::min(scored, n);
  int64_t bytes = (c.num_layers + 2) * n * c.hidden_size * dt  // residual stream + final norm output
                  + n * 4 + m * 4;                             // final rstd, logsumexp
  if (m > 0 && logits_chunk_elements / c.vocab_size >= m) bytes += m * c.vocab_size * dt;  // logits kept
  if (m < n && m > 0) bytes += m * (c.hidden_size * dt + 4);  // the scored rows' final-norm outputs, targets
  if (!checkpointing) bytes += c.num_layers * layer_acts_bytes(c, n, compute);
  return bytes;
}

int64_t Model::saved_activation_bytes() const { return state_ ? state_->saved_bytes : 0; }

namespace {

// Mean NLL of `out` over tokens with a target, and the count of those tokens.
Result<std::pair<double, int64_t>> nll_of(const ForwardOutput& out, const PackedBatch& batch) {
  const std::vector<float> lp = to_host_f32(out.logprobs);
  double sum = 0.0;
  int64_t count = 0;
  for (size_t i = 0; i < lp.size(); ++i) {
    if (batch.targets[i] < 0) continue;
    sum -= lp[i];
    ++count;
  }
  if (count == 0) return invalid_argument("mean NLL of a batch with no targets");
  return std::make_pair(sum / static_cast<double>(count), count);
}

}  // namespace

Result<double> mean_nll(Model& model, const PackedBatch& batch) {
  RLRUN_ASSIGN_OR_RETURN(ForwardOutput out, model.forward(batch, /*for_backward=*/false));
  RLRUN_ASSIGN_OR_RETURN(auto nll, nll_of(out, batch));
  return nll.first;
}

Result<double> mean_nll_backward(Model& model, const PackedBatch& batch) {
  RLRUN_ASSIGN_OR_RETURN(ForwardOutput out, model.forward(batch, /*for_backward=*/true));
  RLRUN_ASSIGN_OR_RETURN(auto nll, nll_of(out, batch));
  std::vector<float> d(batch.targets.size(), 0.0f);
  for (size_t i = 0; i < d.size(); ++i)
    if (batch.targets[i] >= 0) d[i] = static_cast<float>(-1.0 / static_cast<double>(nll.second));
  model.backward(from_host(model.backend(), {static_cast<int64_t>(d.size())}, d));
  return nll.first;
}

}  // namespace rlrun::engine
