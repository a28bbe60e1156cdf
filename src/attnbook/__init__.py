"""attnbook: the small library behind the book *Attention from Scratch*.

The package is layered; a module imports only from its own subpackage or from those listed
before it:

- ``core``: input checks, masks, scores, the attention function, heads, positions, KV caches,
  shape traces, the memory meter, devices;
- ``layers``: additive (Bahdanau), multi-head and grouped-query, latent (MLA), sinks;
- ``efficient``: tiled attention and its backward, ring attention and its process launcher;
- ``models``: the tiny decoder, seq2seq, tasks and text, training loops, shipped models;
- ``analysis``: what trained heads do and the circuits they form;
- ``book``: plotting, diagrams and the explorer; ``exercises``: one checker module per chapter;
- ``bench``: ``python -m attnbook.bench``.

Every public name is re-exported here: ``import attnbook as ab; ab.GroupedQueryAttention``.
Shape notation used everywhere: B batch, T query length, S key length, H query heads,
H_kv key/value heads, D model width, d_head head width. Boolean masks mean True = attend.
"""

from attnbook.analysis.circuits import induction_score, previous_token_score, sink_score
from attnbook.book.explore import AttentionExplorer, explore
from attnbook.book.plotting import (
    plot_attention,
    plot_heads,
    plot_mask,
    plot_scores,
    use_book_style,
)
from attnbook.core.attention import masked_softmax, scaled_dot_product_attention, soft_cap
from attnbook.core.device import get_device, set_seed
from attnbook.core.heads import gate_heads, merge_heads, repeat_kv, split_heads
from attnbook.core.kv_cache import (
    KVCache,
    RollingKVCache,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    latent_cache_bytes_per_token,
)
from attnbook.core.masks import causal_mask, padding_mask, sliding_window_mask
from attnbook.core.memory import TensorMemoryMeter
from attnbook.core.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    rope_permutation,
    sinusoidal_encoding,
)
from attnbook.core.scoring import AdditiveScore, DotScore, GeneralScore, ScaledDotScore
from attnbook.core.trace import ShapeTrace, record, trace_shapes
from attnbook.efficient.tiled import online_softmax, tiled_attention
from attnbook.layers.additive import AdditiveAttention
from attnbook.layers.gqa_conversion import mean_pool_kv_heads
from attnbook.layers.latent import LatentCache, MultiHeadLatentAttention
from attnbook.layers.multihead import GroupedQueryAttention, MultiHeadAttention
from attnbook.layers.sinks import (
    add_sinks_from_lse,
    attention_with_sinks,
    decoder_logits_with_mask,
    streaming_mask,
)
from attnbook.models.capstone import (
    CapstoneModels,
    build_capstone_model,
    load_capstone_models,
    train_capstone_model,
)
from attnbook.models.decoder import DecoderBlock, TinyDecoder, greedy_generate, make_attention
from attnbook.models.lm_training import (
    TrainingHistory,
    evaluate_loss,
    next_token_loss,
    train_language_model,
)
from attnbook.models.reference_model import ReferenceModel, load_reference_model
from attnbook.models.seq2seq import (
    AttentionDecoder,
    Encoder,
    EncoderOutput,
    PlainDecoder,
    Seq2Seq,
    greedy_decode,
    shift_right,
)
from attnbook.models.seq2seq_training import sequence_loss, token_accuracy, train_seq2seq
from attnbook.models.shipped import shipped_file
from attnbook.models.tasks import decode_ids, encode_words, reversal_batch
from attnbook.models.text import (
    CharVocabulary,
    load_genesis,
    random_batch,
    sequential_batches,
    train_validation_split,
)

__all__ = [
    "AdditiveAttention",
    "AdditiveScore",
    "AttentionDecoder",
    "AttentionExplorer",
    "CapstoneModels",
    "CharVocabulary",
    "DecoderBlock",
    "DotScore",
    "Encoder",
    "EncoderOutput",
    "GeneralScore",
    "GroupedQueryAttention",
    "KVCache",
    "LatentCache",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "PlainDecoder",
    "ReferenceModel",
    "ScaledDotScore",
    "Seq2Seq",
    "ShapeTrace",
    "TensorMemoryMeter",
    "TinyDecoder",
    "TrainingHistory",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "build_capstone_model",
    "causal_mask",
    "decode_ids",
    "encode_words",
    "evaluate_loss",
    "explore",
    "gate_heads",
    "get_device",
    "greedy_decode",
    "greedy_generate",
    "induction_score",
    "kv_cache_bytes_per_token",
    "load_capstone_models",
    "load_genesis",
    "load_reference_model",
    "make_attention",
    "masked_softmax",
    "mean_pool_kv_heads",
    "merge_heads",
    "next_token_loss",
    "online_softmax",
    "padding_mask",
    "plot_attention",
    "plot_heads",
    "plot_mask",
    "plot_scores",
    "previous_token_score",
    "random_batch",
    "record",
    "repeat_kv",
    "reversal_batch",
    "rope_angles",
    "rope_permutation",
    "scaled_dot_product_attention",
    "sequence_loss",
    "sequential_batches",
    "set_seed",
    "shift_right",
    "shipped_file",
    "sink_score",
    "sinusoidal_encoding",
    "split_heads",
    "tiled_attention",
    "token_accuracy",
    "trace_shapes",
    "train_capstone_model",
    "train_language_model",
    "train_seq2seq",
    "train_validation_split",
    "use_book_style",
    # Chapter 15
    "RollingKVCache",
    "add_sinks_from_lse",
    "attention_with_sinks",
    "decoder_logits_with_mask",
    "kv_cache_bytes",
    "latent_cache_bytes_per_token",
    "sliding_window_mask",
    "soft_cap",
    "streaming_mask",
]

# Chapter 1's shipped models (the ch00_03 round).
from attnbook.models.seq2seq_training import load_reversal_models  # noqa: E402

__all__ += ["load_reversal_models"]

# Real models' attention layers from their configs, and RoPE's frequencies (issue 31).
from attnbook.core.positions import rope_frequencies  # noqa: E402
from attnbook.layers.model_configs import (  # noqa: E402
    attention_layer_from_config,
    position_settings,
    shipped_model_config,
)

__all__ += [
    "attention_layer_from_config",
    "position_settings",
    "rope_frequencies",
    "shipped_model_config",
]
