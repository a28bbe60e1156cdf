"""attnbook: the small library behind the book *Attention from Scratch*.

The package is layered; a module imports only from its own subpackage or from those listed
before it:

- ``core``: input checks, masks, scores, the attention function, heads, positions, KV caches,
  shape traces, the memory meter, devices;
- ``layers``: additive (Bahdanau), multi-head and grouped-query, latent (MLA), sinks;
- ``efficient``: tiled attention and its backward, ring attention and its process launcher;
- ``kernels``: FlashAttention as Triton kernels (``triton_attention``), forward and backward;
- ``models``: the tiny decoder, seq2seq, tasks and text, training loops, shipped models;
- ``analysis``: what trained heads do and the circuits they form;
- ``book``: plotting, diagrams and the explorer; ``exercises``: one checker module per chapter;
- ``bench``: ``python -m attnbook.bench``.

Every public name is re-exported here: ``import attnbook as ab; ab.GroupedQueryAttention``.
Shape notation used everywhere: B batch, T query length, S key length, H query heads,
H_kv key/value heads, D model width, d_head head width. Boolean masks mean True = attend.
"""

from attnbook.analysis.circuits import (
    induction_score,
    previous_token_score,
    sink_score,
)
from attnbook.book.explore import (
    AttentionExplorer,
    explore,
)
from attnbook.book.plotting import (
    plot_attention,
    plot_cache_budget,
    plot_gains,
    plot_heads,
    plot_mask,
    plot_schedule,
    plot_scores,
    use_book_style,
)
from attnbook.core.attention import (
    masked_softmax,
    scaled_dot_product_attention,
    soft_cap,
)
from attnbook.core.device import (
    get_device,
    set_seed,
)
from attnbook.core.heads import (
    gate_heads,
    merge_heads,
    repeat_kv,
    split_heads,
)
from attnbook.core.kv_cache import (
    KVCache,
    RollingKVCache,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    latent_cache_bytes_per_token,
)
from attnbook.core.masks import (
    causal_mask,
    padding_mask,
    sliding_window_mask,
)
from attnbook.core.memory import TensorMemoryMeter
from attnbook.core.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    rope_frequencies,
    rope_permutation,
    sinusoidal_encoding,
)
from attnbook.core.scoring import (
    AdditiveScore,
    DotScore,
    GeneralScore,
    ScaledDotScore,
)
from attnbook.core.trace import (
    ShapeTrace,
    record,
    trace_shapes,
)
from attnbook.efficient.tiled import (
    online_softmax,
    tiled_attention,
)
from attnbook.kernels.attention import triton_attention
from attnbook.layers.additive import AdditiveAttention
from attnbook.layers.gqa_conversion import mean_pool_kv_heads
from attnbook.layers.latent import (
    LatentCache,
    MultiHeadLatentAttention,
)
from attnbook.layers.model_configs import (
    attention_layer_from_config,
    position_settings,
    shipped_model_config,
)
from attnbook.layers.multihead import (
    GroupedQueryAttention,
    MultiHeadAttention,
)
from attnbook.layers.sinks import (
    add_sinks_from_lse,
    attention_with_sinks,
    streaming_mask,
)
from attnbook.linear.delta_rule import gated_delta_rule
from attnbook.linear.gated_deltanet import GatedDeltaNet
from attnbook.linear.linear_attention import (
    linear_attention,
    linear_attention_weights,
)
from attnbook.linear.linear_layer import LinearAttentionLayer
from attnbook.linear.state import RecurrentState
from attnbook.models.capstone import (
    CapstoneModels,
    build_capstone_model,
    load_capstone_models,
    train_capstone_model,
)
from attnbook.models.decoder import (
    DecoderBlock,
    TinyDecoder,
    greedy_generate,
    make_attention,
)
from attnbook.models.lm_training import (
    TrainingHistory,
    evaluate_loss,
    next_token_loss,
    train_language_model,
)
from attnbook.models.periodic import periodic_batch
from attnbook.models.position_models import (
    PositionModels,
    build_position_model,
    load_position_models,
    train_position_model,
)
from attnbook.models.recall import (
    load_recall_models,
    mqar_batch,
    recall_accuracy,
)
from attnbook.models.reference_model import (
    ReferenceModel,
    load_reference_model,
)
from attnbook.models.seq2seq import (
    AttentionDecoder,
    Encoder,
    EncoderOutput,
    PlainDecoder,
    Seq2Seq,
    greedy_decode,
    shift_right,
)
from attnbook.models.seq2seq_training import (
    load_reversal_models,
    sequence_loss,
    token_accuracy,
    train_seq2seq,
)
from attnbook.models.shipped import shipped_file
from attnbook.models.sparse_models import (
    build_sparse_model,
    load_sparse_models,
)
from attnbook.models.tasks import (
    decode_ids,
    encode_words,
    reversal_batch,
)
from attnbook.models.text import (
    CharVocabulary,
    load_genesis,
    random_batch,
    sequential_batches,
    train_validation_split,
)
from attnbook.serving import (
    CacheFullError,
    PagedKVCache,
    PrefixTable,
    QuantizedKV,
    ServingEngine,
    attention_error,
    block_hashes,
    kv_utilisation,
    paged_attention,
    paged_forward,
    quantize,
    random_workload,
    serve,
)
from attnbook.sparse.indexer import (
    LightningIndexer,
    dense_target,
    indexer_kl_loss,
    topk_recall,
    topk_tokens,
)
from attnbook.sparse.layers import (
    IndexedSparseAttention,
    MoBASelfAttention,
)
from attnbook.sparse.moba import (
    moba_attention,
    moba_blocks,
    moba_mask,
)
from attnbook.sparse.nsa import (
    NativeSparseAttention,
    compressed_mask,
)
from attnbook.sparse.topk import (
    selection_mask,
    topk_attention,
)

__all__ = [
    "AdditiveAttention",
    "AdditiveScore",
    "AttentionDecoder",
    "AttentionExplorer",
    "CacheFullError",
    "CapstoneModels",
    "CharVocabulary",
    "DecoderBlock",
    "DotScore",
    "Encoder",
    "EncoderOutput",
    "GatedDeltaNet",
    "GeneralScore",
    "GroupedQueryAttention",
    "IndexedSparseAttention",
    "KVCache",
    "LatentCache",
    "LightningIndexer",
    "LinearAttentionLayer",
    "MoBASelfAttention",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "NativeSparseAttention",
    "PagedKVCache",
    "PlainDecoder",
    "PositionModels",
    "PrefixTable",
    "QuantizedKV",
    "RecurrentState",
    "ReferenceModel",
    "RollingKVCache",
    "ScaledDotScore",
    "Seq2Seq",
    "ServingEngine",
    "ShapeTrace",
    "TensorMemoryMeter",
    "TinyDecoder",
    "TrainingHistory",
    "add_sinks_from_lse",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "attention_error",
    "attention_layer_from_config",
    "attention_with_sinks",
    "block_hashes",
    "build_capstone_model",
    "build_position_model",
    "build_sparse_model",
    "causal_mask",
    "compressed_mask",
    "decode_ids",
    "dense_target",
    "encode_words",
    "evaluate_loss",
    "explore",
    "gate_heads",
    "gated_delta_rule",
    "get_device",
    "greedy_decode",
    "greedy_generate",
    "indexer_kl_loss",
    "induction_score",
    "kv_cache_bytes",
    "kv_cache_bytes_per_token",
    "kv_utilisation",
    "latent_cache_bytes_per_token",
    "linear_attention",
    "linear_attention_weights",
    "load_capstone_models",
    "load_genesis",
    "load_position_models",
    "load_recall_models",
    "load_reference_model",
    "load_reversal_models",
    "load_sparse_models",
    "make_attention",
    "masked_softmax",
    "mean_pool_kv_heads",
    "merge_heads",
    "moba_attention",
    "moba_blocks",
    "moba_mask",
    "mqar_batch",
    "next_token_loss",
    "online_softmax",
    "padding_mask",
    "paged_attention",
    "paged_forward",
    "periodic_batch",
    "plot_attention",
    "plot_cache_budget",
    "plot_gains",
    "plot_heads",
    "plot_mask",
    "plot_schedule",
    "plot_scores",
    "position_settings",
    "previous_token_score",
    "quantize",
    "random_batch",
    "random_workload",
    "recall_accuracy",
    "record",
    "repeat_kv",
    "reversal_batch",
    "rope_angles",
    "rope_frequencies",
    "rope_permutation",
    "scaled_dot_product_attention",
    "selection_mask",
    "sequence_loss",
    "sequential_batches",
    "serve",
    "set_seed",
    "shift_right",
    "shipped_file",
    "shipped_model_config",
    "sink_score",
    "sinusoidal_encoding",
    "sliding_window_mask",
    "soft_cap",
    "split_heads",
    "streaming_mask",
    "tiled_attention",
    "token_accuracy",
    "topk_attention",
    "topk_recall",
    "topk_tokens",
    "trace_shapes",
    "train_capstone_model",
    "train_language_model",
    "train_position_model",
    "train_seq2seq",
    "train_validation_split",
    "triton_attention",
    "use_book_style",
]
