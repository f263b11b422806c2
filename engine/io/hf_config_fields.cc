// hf_config_fields.cc - the allow-list of config.json's top-level fields (hf_config.h).
#include "engine/io/hf_config.h"

namespace rlrun::engine {
namespace {

using U = HfFieldUse;

constexpr std::string_view kGeneration =
    "a generation default (transformers' legacy place for it); rlrun's sampling comes from its own config";
constexpr std::string_view kOutputs = "what transformers returns (attentions, hidden states, dicts), not what it computes";
constexpr std::string_view kLabels = "metadata for classification heads and tokenizers, which a causal LM does not use";

constexpr HfConfigField kFields[] = {
    // ---- what the model is
    {"architectures", U::kRead, "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or Gemma3ForCausalLM"},
    {"model_type", U::kRead, "llama, qwen2, qwen3 or gemma3_text (when `architectures` is absent)"},
    {"hidden_size", U::kRead, "width of the residual stream"},
    {"num_hidden_layers", U::kRead, "decoder layers"},
    {"num_attention_heads", U::kRead, "query heads"},
    {"num_key_value_heads", U::kRead, "key/value heads (grouped-query attention); default num_attention_heads"},
    {"head_dim", U::kRead, "dimensions per head; default hidden_size / num_attention_heads (qwen3: 128, gemma3: 256)"},
    {"intermediate_size", U::kRead, "width of the gated MLP"},
    {"vocab_size", U::kRead, "rows of the embedding table"},
    {"max_position_embeddings", U::kRead, "longest position; rlrun's max_model_len must not exceed it"},
    {"rms_norm_eps", U::kRead, "RMSNorm epsilon"},
    {"tie_word_embeddings", U::kRead, "the output head shares the embedding table"},
    {"hidden_act", U::kRead, "silu (llama, qwen2, qwen3) or gelu_pytorch_tanh (gemma3)"},
    {"hidden_activation", U::kRead, "gemma3's name for hidden_act: gelu_pytorch_tanh"},
    {"attention_bias", U::kRead, "false (true would add o_proj and q/k/v biases, not implemented); qwen2 ignores it "
                                 "like transformers (its q/k/v always have biases)"},
    {"mlp_bias", U::kRead, "false (MLP biases are not implemented)"},
    {"attention_dropout", U::kRead, "0 (rlrun trains without dropout)"},
    // ---- positions
    {"rope_theta", U::kRead, "RoPE base (transformers 4.x)"},
    {"rope_scaling", U::kRead, "RoPE variant (transformers 4.x): null, linear, dynamic, llama3 or yarn"},
    {"rope_parameters", U::kRead, "RoPE base and variant (transformers 5.x), flat or per layer type"},
    {"rope_local_base_freq", U::kRead, "gemma3: RoPE base of the sliding-window layers"},
    {"partial_rotary_factor", U::kRead, "1 (RoPE over part of a head is not implemented)"},
    // ---- attention pattern
    {"query_pre_attn_scalar", U::kRead, "gemma3: attention scores scaled by 1/sqrt(query_pre_attn_scalar)"},
    {"sliding_window", U::kRead, "gemma3: positions a sliding layer's query sees; qwen2/qwen3: only with "
                                 "use_sliding_window, which is refused"},
    {"layer_types", U::kRead, "full_attention or sliding_attention per layer (transformers >= 4.55)"},
    {"sliding_window_pattern", U::kRead, "gemma3 before layer_types: every N-th layer is global"},
    {"_sliding_window_pattern", U::kRead, "the same, as transformers 5 saves it"},
    {"use_sliding_window", U::kRead, "qwen2/qwen3: false (Qwen's sliding window is not implemented)"},
    {"max_window_layers", U::kIgnored, "qwen2/qwen3: used only with use_sliding_window, which must be false"},
    {"attn_logit_softcapping", U::kRead, "null (softcapping is not implemented)"},
    {"final_logit_softcapping", U::kRead, "null (softcapping is not implemented)"},
    {"use_bidirectional_attention", U::kRead, "false (rlrun's decoder is causal)"},
    // ---- tokens and storage
    {"bos_token_id", U::kRead, "the beginning-of-sequence id"},
    {"eos_token_id", U::kRead, "an id or a list of ids; generation stops at any of them"},
    {"pad_token_id", U::kRead, "its embedding lookups get no gradient (torch's padding_idx), as in transformers"},
    {"torch_dtype", U::kRead, "the stored dtype (transformers 4.x); shown, the weights load as they are stored"},
    {"dtype", U::kRead, "the same (transformers 5.x)"},
    // ---- refused outright
    {"quantization_config", U::kRefused, "quantized HF weights (bitsandbytes, GPTQ, AWQ) cannot load; use the "
                                          "unquantized checkpoint or a GGUF file"},
    {"num_experts", U::kRefused, "mixture of experts is not supported"},
    {"num_local_experts", U::kRefused, "mixture of experts is not supported"},
    {"num_experts_per_tok", U::kRefused, "mixture of experts is not supported"},
    {"moe_intermediate_size", U::kRefused, "mixture of experts is not supported"},
    {"shared_expert_intermediate_size", U::kRefused, "mixture of experts is not supported"},
    {"decoder_sparse_step", U::kRefused, "mixture of experts is not supported"},
    {"n_routed_experts", U::kRefused, "mixture of experts is not supported"},
    {"mlp_only_layers", U::kRefused, "mixture of experts is not supported"},
    {"is_encoder_decoder", U::kRefused, "encoder-decoder models are not supported"},
    {"add_cross_attention", U::kRefused, "cross-attention is not supported"},
    {"pruned_heads", U::kRefused, "pruned attention heads are not supported"},
    // ---- ignored: cannot change what the model computes
    {"_name_or_path", U::kIgnored, "where transformers loaded it from"},
    {"transformers_version", U::kIgnored, "the writer's version; the fields themselves say what the model is"},
    {"initializer_range", U::kIgnored, "random initialisation only; a checkpoint has its weights"},
    {"use_cache", U::kIgnored, "whether transformers keeps a KV cache; rlrun always does when generating"},
    {"cache_implementation", U::kIgnored, "transformers' KV-cache class; rlrun has its own paged cache"},
    {"pretraining_tp", U::kIgnored, "transformers 4.x splits the projections into this many slices and adds them up: "
                                    "the same function"},
    {"auto_map", U::kIgnored, "code for trust_remote_code; rlrun implements the class named in `architectures`"},
    {"output_attentions", U::kIgnored, kOutputs},
    {"output_hidden_states", U::kIgnored, kOutputs},
    {"return_dict", U::kIgnored, kOutputs},
    {"use_return_dict", U::kIgnored, kOutputs},
    {"torchscript", U::kIgnored, kOutputs},
    {"is_decoder", U::kIgnored, "a causal LM is a decoder either way"},
    {"tie_encoder_decoder", U::kIgnored, "encoder-decoder models only"},
    {"chunk_size_feed_forward", U::kIgnored, "transformers computes the MLP in chunks of tokens: the same function"},
    {"use_bfloat16", U::kIgnored, "a TensorFlow-era storage hint"},
    {"tf_legacy_loss", U::kIgnored, "TensorFlow only"},
    {"id2label", U::kIgnored, kLabels},
    {"label2id", U::kIgnored, kLabels},
    {"problem_type", U::kIgnored, kLabels},
    {"finetuning_task", U::kIgnored, kLabels},
    {"tokenizer_class", U::kIgnored, kLabels},
    {"prefix", U::kIgnored, kLabels},
    {"task_specific_params", U::kIgnored, kLabels},
    {"sep_token_id", U::kIgnored, kLabels},
    {"decoder_start_token_id", U::kIgnored, "encoder-decoder generation only"},
    {"cross_attention_hidden_size", U::kIgnored, "encoder-decoder models only"},
    {"max_length", U::kIgnored, kGeneration},
    {"min_length", U::kIgnored, kGeneration},
    {"do_sample", U::kIgnored, kGeneration},
    {"early_stopping", U::kIgnored, kGeneration},
    {"num_beams", U::kIgnored, kGeneration},
    {"num_beam_groups", U::kIgnored, kGeneration},
    {"diversity_penalty", U::kIgnored, kGeneration},
    {"temperature", U::kIgnored, kGeneration},
    {"top_k", U::kIgnored, kGeneration},
    {"top_p", U::kIgnored, kGeneration},
    {"typical_p", U::kIgnored, kGeneration},
    {"repetition_penalty", U::kIgnored, kGeneration},
    {"length_penalty", U::kIgnored, kGeneration},
    {"no_repeat_ngram_size", U::kIgnored, kGeneration},
    {"encoder_no_repeat_ngram_size", U::kIgnored, kGeneration},
    {"bad_words_ids", U::kIgnored, kGeneration},
    {"num_return_sequences", U::kIgnored, kGeneration},
    {"output_scores", U::kIgnored, kGeneration},
    {"return_dict_in_generate", U::kIgnored, kGeneration},
    {"forced_bos_token_id", U::kIgnored, kGeneration},
    {"forced_eos_token_id", U::kIgnored, kGeneration},
    {"remove_invalid_values", U::kIgnored, kGeneration},
    {"exponential_decay_length_penalty", U::kIgnored, kGeneration},
    {"suppress_tokens", U::kIgnored, kGeneration},
    {"begin_suppress_tokens", U::kIgnored, kGeneration},
};

}  // namespace

std::span<const HfConfigField> hf_config_fields() { return kFields; }

}  // namespace rlrun::engine
