"""The attention layer of a real model, built from its Hugging Face ``config.json``.

:func:`attention_layer_from_config` reads a config (as a dict) and returns the
:class:`GroupedQueryAttention` of one layer, with the head width, score scale, rotary settings,
QK-norm, window, soft-cap, sinks and output gate that the model's code gives that layer. It reads
the spelling of the configs published with the models (``rope_theta``, ``rope_scaling``, a
top-level ``partial_rotary_factor``, Gemma 3's ``rope_local_base_freq``) and the one
transformers 5.x writes (``rope_parameters``, nested per layer type for Gemma 3). A model type
it does not know, or a key whose value it cannot honour, is a ``ValueError``: a layer that runs
but differs from the model is worse than none.

:func:`shipped_model_config` reads the small copies in ``data/model_configs/`` and
:func:`position_settings` summarises a config's positions (chapter 15's table).
"""

import json
from importlib.resources import files

import torch

from attnbook.layers.multihead import GroupedQueryAttention

MODEL_TYPES = (
    "llama",
    "mistral",
    "gemma2",
    "gemma3_text",
    "qwen3",
    "qwen3_next",
    "olmo2",
    "gpt_oss",
)
SHIPPED_CONFIGS = (
    "llama-3.1-8b",
    "mistral-7b-v0.1",
    "gemma-2-2b",
    "gemma-3-4b",
    "qwen3-0.6b",
    "qwen3-next-80b-a3b",
    "olmo-2-0425-1b",
    "gpt-oss-20b",
)
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")
_ROPE_KEYS = ("rope_theta", "partial_rotary_factor")  # rope_parameters' non-scaling keys
# keys that change attention in some model, refused where this loader would ignore them
_UNHONOURED = {"clip_qkv": None, "no_rope_layers": None, "attn_logit_softcapping": None}


def shipped_model_config(name: str) -> dict:
    """The shipped copy of a published config, ``name`` one of :data:`SHIPPED_CONFIGS`."""
    if name not in SHIPPED_CONFIGS:
        raise ValueError(f"name: expected one of {SHIPPED_CONFIGS}, got {name!r}")
    return json.loads((files("attnbook.data") / "model_configs" / f"{name}.json").read_text())


def _get(config: dict, key: str, default: object = None, *, required: bool = False) -> object:
    if required and config.get(key) is None:
        raise ValueError(f"config: the key {key!r} is needed, got {config.get(key)!r}")
    return config.get(key, default) if config.get(key) is not None else default


def layer_types(config: dict) -> list[str]:
    """Each layer's kind: ``full_attention``, ``sliding_attention`` or ``linear_attention``.

    From the config's ``layer_types`` where it has one, else from the model's own rule.
    """
    model_type = _model_type(config)
    n_layers = _get(config, "num_hidden_layers", required=True)
    if config.get("layer_types") is not None:
        kinds = list(config["layer_types"])
        unknown = sorted(set(kinds) - set(LAYER_TYPES))
        if len(kinds) != n_layers or unknown:
            raise ValueError(
                f"config: layer_types must list num_hidden_layers = {n_layers} kinds from "
                f"{LAYER_TYPES}, got {len(kinds)} with unknown kinds {unknown}"
            )
        return kinds
    full, sliding = "full_attention", "sliding_attention"
    if model_type == "mistral":
        return [full if config.get("sliding_window") is None else sliding] * n_layers
    if model_type == "gemma2":  # even layers local, odd layers global
        return [sliding if (i + 1) % 2 else full for i in range(n_layers)]
    if model_type == "gemma3_text":
        pattern = config.get("sliding_window_pattern", config.get("_sliding_window_pattern", 6))
        return [sliding if (i + 1) % pattern else full for i in range(n_layers)]
    if model_type == "qwen3" and config.get("use_sliding_window"):
        first = _get(config, "max_window_layers", n_layers)
        return [sliding if i >= first else full for i in range(n_layers)]
    if model_type == "qwen3_next":
        interval = _get(config, "full_attention_interval", 4)
        return ["linear_attention" if (i + 1) % interval else full for i in range(n_layers)]
    if model_type == "gpt_oss":
        return [sliding if i % 2 == 0 else full for i in range(n_layers)]
    return [full] * n_layers


def _model_type(config: dict) -> str:
    if not isinstance(config, dict):
        raise ValueError(f"config: expected a dict (a parsed config.json), got {type(config)}")
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        hint = " (pass its text_config)" if model_type == "gemma3" else ""
        raise ValueError(
            f"config: model_type must be one of {MODEL_TYPES}, got {model_type!r}{hint}"
        )
    return model_type


def _scaling_from(params: dict | None, config: dict, name: str) -> dict | None:
    """transformers' rope scaling dict in the library's spelling (None for plain RoPE)."""
    if params is None:
        return None
    params = {key: value for key, value in params.items() if key not in _ROPE_KEYS}
    kind = params.pop("rope_type", params.pop("type", "default"))
    if kind == "default":
        if params:
            raise ValueError(f"config: {name} of rope_type 'default' has extra keys {params}")
        return None
    scaling = {"rope_type": kind, **params}
    if kind in ("dynamic", "yarn") and "original_max_position_embeddings" not in scaling:
        scaling["original_max_position_embeddings"] = _get(
            config, "max_position_embeddings", required=True
        )
    if kind == "yarn" and config.get("max_position_embeddings") is not None:
        longest = config["max_position_embeddings"] / scaling["original_max_position_embeddings"]
        if longest != scaling.get("factor"):
            raise ValueError(
                f"config: {name} has YaRN factor {scaling.get('factor')!r} but "
                f"max_position_embeddings / original_max_position_embeddings = {longest}; "
                f"transformers versions differ in which one they use"
            )
    return scaling


def _rope_settings(config: dict, kind: str) -> tuple[float, dict | None, float]:
    """(base, scaling, rotary fraction) of a layer of ``kind``, from either spelling."""
    gemma3 = config["model_type"] == "gemma3_text"
    if config.get("rope_parameters") is not None:
        params = config["rope_parameters"]
        if gemma3 or kind in params:
            params = params.get(kind, params.get("full_attention"))
        if not isinstance(params, dict) or "rope_theta" not in params:
            raise ValueError(f"config: rope_parameters has no rope_theta for {kind}: {params!r}")
        fraction = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
        scaling = _scaling_from(params, config, "rope_parameters")
        return params["rope_theta"], scaling, fraction
    fraction = _get(config, "partial_rotary_factor", 1.0)
    if gemma3 and kind == "sliding_attention":  # local layers: their own base, no scaling
        return _get(config, "rope_local_base_freq", 10000.0), None, fraction
    scaling = _scaling_from(config.get("rope_scaling"), config, "rope_scaling")
    return _get(config, "rope_theta", 10000.0), scaling, fraction


def _check_unhonoured(config: dict, model_type: str) -> None:
    """Refuse keys set to values this loader would silently ignore."""
    for key, neutral in _UNHONOURED.items():
        honoured = key == "attn_logit_softcapping" and model_type in ("gemma2", "gemma3_text")
        if not honoured and config.get(key, neutral) != neutral:
            raise ValueError(
                f"config: {key} = {config[key]!r} is not part of {model_type}'s attention as "
                f"this loader builds it; it cannot be honoured"
            )
    if config.get("use_sliding_window") and model_type != "qwen3":
        raise ValueError(
            f"config: use_sliding_window is not read for {model_type}; it cannot be honoured"
        )


def attention_layer_from_config(config: dict, layer_idx: int = 0) -> GroupedQueryAttention:
    """The :class:`GroupedQueryAttention` of layer ``layer_idx`` of a Hugging Face config.

    Supports ``model_type`` llama (Llama 3.1), mistral, gemma2, gemma3_text (Gemma 3's text
    model), qwen3, qwen3_next (its full-attention layers; its linear-attention layers are a
    ``ValueError``), olmo2 and gpt_oss. Every layer uses RoPE in the halves layout. The weights
    are freshly initialised; build under ``with torch.device("meta"):`` to inspect a large
    model's layer without allocating it. Loading checkpoints: Gemma's and Qwen3-Next's
    QK-norms multiply by (1 + w), so their ``q_norm``/``k_norm`` weights load as ``1 + w``;
    Qwen3-Next's ``q_proj`` holds the queries and the gate interleaved per head.
    """
    model_type = _model_type(config)
    _check_unhonoured(config, model_type)
    kinds = layer_types(config)
    n_layers = len(kinds)
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, int):
        raise ValueError(f"layer_idx: expected an int in [0, {n_layers - 1}], got {layer_idx!r}")
    if not 0 <= layer_idx < n_layers:
        raise ValueError(f"layer_idx: expected an int in [0, {n_layers - 1}], got {layer_idx!r}")
    kind = kinds[layer_idx]
    if kind == "linear_attention":
        raise ValueError(
            f"layer_idx: layer {layer_idx} of this {model_type} is a linear-attention layer "
            f"(Gated DeltaNet), not softmax attention; its full-attention layers are "
            f"{[i for i, k in enumerate(kinds) if k == 'full_attention']}"
        )
    d_model = _get(config, "hidden_size", required=True)
    n_heads = _get(config, "num_attention_heads", required=True)
    head_dim = _get(config, "head_dim", d_model // n_heads)
    base, scaling, fraction = _rope_settings(config, kind)
    options = {
        "bias": bool(_get(config, "attention_bias", False)),
        "dropout": float(_get(config, "attention_dropout", 0.0)),
        "rope": True,
        "rope_base": float(base),
        "rope_layout": "halves",
        "rope_scaling": scaling,
        "rope_fraction": float(fraction),
        "head_dim": head_dim,
    }
    if kind == "sliding_attention":
        options["window"] = _get(config, "sliding_window", required=True)
    if model_type in ("gemma2", "gemma3_text"):
        options["scale"] = _get(config, "query_pre_attn_scalar", required=True) ** -0.5
        options["logit_softcap"] = _get(config, "attn_logit_softcapping")
    if model_type in ("gemma3_text", "qwen3", "qwen3_next", "olmo2"):
        over = "projection" if model_type == "olmo2" else "head"
        options.update(qk_norm=over, qk_norm_eps=_get(config, "rms_norm_eps", required=True))
    if model_type == "qwen3_next":
        options["output_gate"] = True
    if model_type == "gpt_oss":
        options["sinks"] = True
    n_kv_heads = _get(config, "num_key_value_heads", n_heads)
    return GroupedQueryAttention(d_model, n_heads, n_kv_heads, **options)


def position_settings(config: dict) -> dict:
    """How a config places tokens, read from the layers :func:`attention_layer_from_config`
    builds: the RoPE bases (sorted), the scaling type and factor (of the layers that scale),
    the rotary fraction, and the number of layers without positions (linear attention)."""
    bases, scalings, fractions, without = set(), set(), set(), 0
    with torch.device("meta"):
        for idx, kind in enumerate(layer_types(config)):
            if kind == "linear_attention":
                without += 1
                continue
            layer = attention_layer_from_config(config, idx)
            bases.add(layer.rope_base)
            fractions.add(layer.rotary_dim / layer.head_dim)
            if layer.rope_scaling is not None:
                scalings.add((layer.rope_scaling["rope_type"], layer.rope_scaling["factor"]))
    ((scaling, factor),) = scalings or {(None, None)}
    (fraction,) = fractions
    return {
        "rope_bases": sorted(bases),
        "scaling": scaling,
        "factor": factor,
        "rope_fraction": fraction,
        "layers_without_positions": without,
        "layers": len(layer_types(config)),
    }
