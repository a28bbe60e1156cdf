"""Reference answers to every checked exercise, as a reader might write them.

``tests/test_exercises.py`` runs each checker on these (they must pass) and on plausible wrong
answers built from them (each must be refused with a hint naming its mistake).
"""

import copy
import math
import statistics

import torch

from attnbook import KVCache, causal_mask, induction_score, previous_token_score


def query_magnitude(target, n_keys, d):  # ch00
    score = math.log(target * (n_keys - 1) / (1 - target))
    return score * math.sqrt(d)


def attention_parameter_count(D):
    return 3 * D * D + D


def window_mask(T, width):
    return causal_mask(T) & ~torch.ones(T, T, dtype=torch.bool).tril(diagonal=-width)


def concat_scores(query, key, W, v):
    T, S = query.size(0), key.size(0)
    pairs = torch.cat(
        [query[:, None, :].expand(T, S, -1), key[None, :, :].expand(T, S, -1)], dim=-1
    )  # (T, S, d_q + d_k)
    return torch.tanh(pairs @ W.T) @ v  # (T, S)


def largest_length(budget, n_heads, size):
    return math.isqrt(budget // (n_heads * size))


def zero_query_output(x, W_v):  # ch03
    values = x @ W_v  # (B, S, d_head)
    return values.mean(dim=1, keepdim=True).expand_as(values)


def is_equivariant(attention, x, permutation):  # ch03
    return torch.allclose(attention(x[:, permutation]), attention(x)[:, permutation], atol=1e-6)


def prefix_lm_mask(T, P):
    return causal_mask(T) | (torch.arange(T) < P)


def head_projection(torch_mha, role, h):
    D, d_head = torch_mha.embed_dim, torch_mha.embed_dim // torch_mha.num_heads
    start = "qkv".index(role) * D + h * d_head
    rows = slice(start, start + d_head)
    return torch_mha.in_proj_weight[rows], torch_mha.in_proj_bias[rows]


def repeat_kv(x, n_repeats):  # heads on axis 2: (B, S, H_kv, d_head)
    B, S, H_kv, d_head = x.shape
    return x[:, :, :, None].expand(B, S, H_kv, n_repeats, d_head).reshape(B, S, -1, d_head)


class PreallocatedKVCache(KVCache):
    def __init__(self, max_len):
        super().__init__()
        self.max_len = max_len
        self.length = 0

    def __len__(self):
        return self.length

    def append(self, keys, values):
        stop = self.length + keys.size(2)
        if stop > self.max_len:
            raise ValueError(f"{stop} positions do not fit in {self.max_len}")
        if self.keys is None:
            shape = (*keys.shape[:2], self.max_len, keys.shape[3])
            self.key_buffer, self.value_buffer = keys.new_empty(shape), values.new_empty(shape)
        self.key_buffer[:, :, self.length : stop] = keys
        self.value_buffer[:, :, self.length : stop] = values
        self.length = stop
        self.keys = self.key_buffer[:, :, :stop]
        self.values = self.value_buffer[:, :, :stop]
        return self.keys, self.values


class OwnBufferNames(KVCache):
    """A correct preallocated cache that never sets KVCache's ``keys`` and ``values``."""

    def __init__(self, max_len):
        super().__init__()
        self.max_len, self.length, self.k_buf, self.v_buf = max_len, 0, None, None

    def __len__(self):
        return self.length

    def append(self, keys, values):
        if self.k_buf is None:
            shape = (*keys.shape[:2], self.max_len, keys.shape[3])
            self.k_buf, self.v_buf = keys.new_empty(shape), values.new_empty(shape)
        stop = self.length + keys.size(2)
        if stop > self.max_len:
            raise ValueError(f"{stop} positions do not fit in {self.max_len}")
        self.k_buf[:, :, self.length : stop] = keys
        self.v_buf[:, :, self.length : stop] = values
        self.length = stop
        return self.k_buf[:, :, :stop], self.v_buf[:, :, :stop]


def online_logsumexp(x, block_size):
    running_max = x.new_full(x.shape[:-1], float("-inf"))
    running_sum = x.new_zeros(x.shape[:-1])
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        new_max = torch.maximum(running_max, block.amax(dim=-1))
        rescale = torch.exp(running_max - new_max)
        running_sum = running_sum * rescale + torch.exp(block - new_max[..., None]).sum(dim=-1)
        running_max = new_max
    return running_max + torch.log(running_sum)


def merge_partials(out_a, lse_a, out_b, lse_b):
    new_max = torch.maximum(lse_a, lse_b)
    safe_max = torch.where(new_max == float("-inf"), 0.0, new_max)
    weight_a, weight_b = torch.exp(lse_a - safe_max), torch.exp(lse_b - safe_max)
    total = weight_a + weight_b
    safe_total = torch.where(total > 0, total, 1.0)
    lse = torch.where(total > 0, safe_max + torch.log(safe_total), float("-inf"))
    return (out_a * weight_a + out_b * weight_b) / safe_total, lse


def cache_bytes_per_token(model):
    bytes_per_number = next(model.parameters()).element_size()
    total = 0
    for block in model.blocks:
        attention = block.attention
        if hasattr(attention, "kv_latent_dim"):
            total += (attention.kv_latent_dim + attention.rope_dim) * bytes_per_number
        else:
            total += 2 * attention.n_kv_heads * attention.head_dim * bytes_per_number
    return total


def start_of_word_weight(weights, windows, separator_ids):
    total = weights.new_zeros(weights.size(0), weights.size(2))  # (L, H)
    count = 0
    for b, row in enumerate(windows.tolist()):
        start = None  # the current word's first letter, once a separator has been seen
        for t in range(len(row)):
            if t > 0 and row[t - 1] in separator_ids:
                start = t
            if start is not None:
                total += weights[:, b, :, t, start]  # (L, H)
                count += 1
    return total / count


def alibi_slopes(n_heads):
    power = 2 ** math.floor(math.log2(n_heads))
    slopes = [2 ** (-8 * (h + 1) / power) for h in range(power)]
    if power < n_heads:
        slopes += alibi_slopes(2 * power)[0::2][: n_heads - power].tolist()
    return torch.tensor(slopes)


def previous_share(weights):
    return weights.diagonal(offset=-1).mean().item()


def previous_shares(model, tokens, skip=True, skip_two=True, layer=0, key=2):
    with torch.no_grad():
        weights = model.attention_weights(tokens)[layer]  # (B, H, T, T)

    def on(offset, skip):
        diagonal = weights.diagonal(offset=-offset, dim1=-2, dim2=-1)  # (B, H, T - k)
        if skip:
            return diagonal.mean(dim=(0, 2))
        return diagonal.sum(dim=(0, 2)) / (weights.size(0) * weights.size(-1))

    shares = on(1, skip)
    return shares, shares / on(key, skip_two)


def head_importance(model, inputs, targets, dtype=None):
    n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
    dtype = dtype or next(model.parameters()).dtype  # the gates must match the model
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for window, target in zip(inputs, targets, strict=True):
        gates = torch.ones(n_layers, n_heads, dtype=dtype, requires_grad=True)
        logits = model(window[None], head_mask=gates)
        loss = torch.nn.functional.cross_entropy(logits[0], target)
        total += torch.autograd.grad(loss, gates)[0].abs()
    return total / len(inputs)


def supported_orderings(
    losses, spread=statistics.stdev, n_spreads=2.0, per_seed=True, n_less=0, strict=True
):
    def half_width(values):
        return n_spreads * spread(values) / (math.sqrt(len(values) - n_less) if per_seed else 1.0)

    upper = {h: statistics.fmean(v) + half_width(v) for h, v in losses.items()}
    lower = {h: statistics.fmean(v) - half_width(v) for h, v in losses.items()}
    below = (lambda x, y: x < y) if strict else (lambda x, y: x <= y)
    return {(a, b) for a in losses for b in losses if a != b and below(upper[a], lower[b])}


def scale_for(d, sigma):
    return 1.0 / (sigma**2 * math.sqrt(d))


def without_head(attention, h):
    pruned = copy.deepcopy(attention)
    d_head = attention.head_dim
    with torch.no_grad():
        pruned.out_proj.weight[:, h * d_head : (h + 1) * d_head] = 0.0
    return pruned


def sink_window_mask(T, window, n_sink):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return ((j <= i) & (j > i - window)) | ((j < n_sink) & (j <= i))


def weights_with_sink(scores, sinks):
    sink_column = sinks[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.cat([scores, sink_column], dim=-1).softmax(dim=-1)[..., :-1]


def receptive_field(windows, seq_len):
    if None in windows:
        return seq_len
    return min(seq_len, sum(window - 1 for window in windows) + 1)


def find_circuit(model):
    block = torch.randint(0, 64, (32, 10), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([torch.full((32, 1), 64), block, block], dim=1)  # (B, 21): BOS, r, r
    weights = model.attention_weights(tokens)[..., 1:, 1:]  # (L, B, H, 20, 20)
    previous = previous_token_score(weights[0]).mean(dim=0).argmax().item()
    induction = induction_score(weights[1], 10).mean(dim=0).argmax().item()
    return previous, induction


def induction_share(weights, period):
    return weights.diagonal(offset=-(period - 1))[1:].mean().item()


def rope_halves(x, positions, base=10000.0):
    dim = x.size(-1)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = (positions[:, None] * frequencies[None, :]).to(x.dtype)  # (T, dim / 2)
    first, second = x.chunk(2, dim=-1)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def latent_scores(layer, x, latents):
    n_heads, head_dim = layer.n_heads, layer.head_dim
    w_uk = layer.k_up.weight.view(n_heads, head_dim, -1)  # (H, d_head, d_c)
    q = layer.q_proj(x).unflatten(-1, (n_heads, head_dim)).transpose(1, 2)  # (B, H, T, d_head)
    q_latent = q @ w_uk  # (B, H, T, d_c)
    return q_latent @ latents[:, None].transpose(-2, -1) / math.sqrt(head_dim)  # (B, H, T, S)


def attention_backward(q, k, v, out, lse, d_out, scale):
    a = torch.exp(q @ k.T * scale - lse)  # (T, S): the weights, recomputed from the lse
    dv = a.T @ d_out  # (S, d_v)
    da = d_out @ v.T  # (T, S)
    dz = a * (da - (d_out * out).sum(dim=-1, keepdim=True))  # (T, S)
    return dz @ k * scale, dz.T @ q * scale, dv


def causal_tile_kind(start_m, start_n, block_m, block_n):  # ch16
    if start_n + block_n - 1 <= start_m:
        return "full"
    if start_n > start_m + block_m - 1:
        return "skip"
    return "diagonal"


def causal_flash(q, k, v, BM, BN, **switches):  # ch16, a Triton kernel: see triton_answers.py
    from triton_answers import causal_flash as run

    return run(q, k, v, BM, BN, **switches)


def flash_exp2(q, k, v, **switches):  # ch16, a Triton kernel: see triton_answers.py
    from triton_answers import flash_exp2 as run

    return run(q, k, v, **switches)


def delta_rows(out, grad_out, **switches):  # ch16, a Triton kernel: see triton_answers.py
    from triton_answers import delta_rows as run

    return run(out, grad_out, **switches)


def small_dq(q, k, v, grad_out, **switches):  # ch16, a Triton kernel: see triton_answers.py
    from triton_answers import small_dq as run

    return run(q, k, v, grad_out, **switches)


def paged_slots(length, block_size):  # ch17
    return block_size * -(-length // block_size)


def gather_keys(pool, table, length):  # ch17
    return pool[table].reshape(-1, pool.size(-1))[:length]


def beam_blocks(prompt_len, n_beams, n_new, block_size):  # ch17
    full, partial = divmod(prompt_len, block_size)
    prompt_blocks = -(-prompt_len // block_size)
    new_per_beam = -(-(prompt_len + n_new) // block_size) - prompt_blocks
    versions_of_last = n_beams if partial and n_new else int(bool(partial))
    return full + versions_of_last + n_beams * new_per_beam


def block_hashes(tokens, block_size):  # ch17
    hashes, previous = [], None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        previous = hash((previous, tuple(tokens[start : start + block_size])))
        hashes.append(previous)
    return hashes


def delta_rule_step(state, k, v, alpha, beta):  # ch18
    return alpha * state + beta * torch.outer(k, v - alpha * state.T @ k)


def erase_gain(norm, beta):  # ch18
    return max(1.0, abs(1 - beta * norm**2))


def orthonormal_keys(count, d_k, generator):  # ch18
    random = torch.randn(d_k, count, generator=generator, dtype=torch.float64)
    return torch.linalg.qr(random).Q.T


def chunk_end_state(start, keys, corrections, gamma):  # ch18
    return gamma[-1] * start + (keys * (gamma[-1] / gamma)[:, None]).T @ corrections


def moba_choice(q, k, block_size, top_k, *, own=True, causal=True, extra=0, future=True):  # ch19
    T = q.size(0)
    n_blocks = -(-T // block_size)
    means = torch.stack([k[j * block_size : (j + 1) * block_size].mean(0) for j in range(n_blocks)])
    scores = q @ means.T  # (T, n_blocks)
    own_block = torch.arange(T) // block_size  # (T,)
    blocks = torch.arange(n_blocks)
    if future:  # False: future blocks compete for the top_k slots
        scores = scores.masked_fill(blocks > own_block[:, None], float("-inf"))
    if own:
        scores = scores.masked_fill(blocks == own_block[:, None], float("inf"))
    best = scores.topk(min(top_k + extra, n_blocks), dim=-1)
    chosen = torch.zeros(T, n_blocks, dtype=torch.bool)
    chosen.scatter_(1, best.indices, best.values > float("-inf"))
    mask = chosen[:, torch.arange(T) // block_size]
    return mask & torch.ones(T, T, dtype=torch.bool).tril() if causal else mask


def recall(chosen, target, k):  # ch19
    best = target.topk(k, dim=-1).indices  # (T, k)
    hits = (best[:, :, None] == chosen[:, None, :]).any(-1)  # (T, k)
    return hits.double().mean(-1)[k:]


def indexer_crossover(index_heads, index_dim, top_k, *, wrong=""):  # ch19
    attention_flops = 128 * (576 + 512) * 2  # per kept latent: 128 heads, MQA mode
    index_flops = index_heads * index_dim * 2  # per cached token
    index_bytes = index_dim + 4 * (index_dim // 128)  # FP8 numbers, one FP32 scale per 128
    if wrong == "scores only":  # forgets the weighted values
        attention_flops = 128 * 576 * 2
    if wrong == "no scales":
        index_bytes = index_dim
    if wrong == "keys per head":  # an indexer key per head, not one shared by the heads
        index_bytes *= index_heads
    flops, size = top_k * attention_flops, top_k * 576 * 2  # the main attention's top_k
    if wrong == "or equal":  # the first L at which the indexer costs at least as much
        return -(-flops // index_flops), -(-size // index_bytes)
    return flops // index_flops + 1, size // index_bytes + 1


SOLUTIONS = {
    "check_window_mask": window_mask,
    "check_query_magnitude": query_magnitude,
    "check_attention_parameter_count": attention_parameter_count,
    "check_concat_scores": concat_scores,
    "check_scale_for": scale_for,
    "check_largest_length": largest_length,
    "check_zero_query_output": zero_query_output,
    "check_is_equivariant": is_equivariant,
    "check_prefix_lm_mask": prefix_lm_mask,
    "check_head_projection": head_projection,
    "check_without_head": without_head,
    "check_repeat_kv": repeat_kv,
    "check_alibi_slopes": alibi_slopes,
    "check_rope_halves": rope_halves,
    "check_preallocated_kv_cache": PreallocatedKVCache,
    "check_online_logsumexp": online_logsumexp,
    "check_attention_backward": attention_backward,
    "check_merge_partials": merge_partials,
    "check_latent_scores": latent_scores,
    "check_cache_bytes_per_token": cache_bytes_per_token,
    "check_start_of_word_weight": start_of_word_weight,
    "check_previous_share": previous_share,
    "check_previous_shares": previous_shares,
    "check_head_importance": head_importance,
    "check_supported_orderings": supported_orderings,
    "check_induction_share": induction_share,
    "check_find_circuit": find_circuit,
    "check_sink_window_mask": sink_window_mask,
    "check_sink_weights": weights_with_sink,
    "check_receptive_field": receptive_field,
    "check_causal_tile_kind": causal_tile_kind,
    "check_causal_flash": causal_flash,
    "check_flash_exp2": flash_exp2,
    "check_delta_rows": delta_rows,
    "check_dq_kernel": small_dq,
    "check_paged_slots": paged_slots,
    "check_gather_keys": gather_keys,
    "check_beam_blocks": beam_blocks,
    "check_block_hashes": block_hashes,
    "check_delta_rule_step": delta_rule_step,
    "check_erase_gain": erase_gain,
    "check_orthonormal_keys": orthonormal_keys,
    "check_chunk_end_state": chunk_end_state,
    "check_moba_choice": moba_choice,
    "check_recall": recall,
    "check_indexer_crossover": indexer_crossover,
}


def keep_first_kv_head(source, n_kv_heads, *, pick=0, first_heads=False, pooled_bias=False):
    """ch06: every group's first key/value head (``pick``, ``first_heads`` and ``pooled_bias``
    make the wrong answers: another head of each group, the first H_kv heads, the mean's bias)."""
    from attnbook import mean_pool_kv_heads  # here, so the shared import line above stays as is

    converted = mean_pool_kv_heads(source, n_kv_heads)  # copies q_proj and out_proj
    group_size, head_dim = source.n_heads // n_kv_heads, source.head_dim
    width = source.q_proj.in_features  # D
    with torch.no_grad():
        for name in ("k_proj", "v_proj"):
            old, new = getattr(source, name), getattr(converted, name)
            groups = (group_size, n_kv_heads) if first_heads else (n_kv_heads, group_size)
            heads = old.weight.view(*groups, head_dim, width)
            # (H_kv, d_head, D): one head of every group
            rows = heads[0] if first_heads else heads[:, pick]
            new.weight.copy_(rows.reshape(n_kv_heads * head_dim, width))
            if not pooled_bias:
                # (H_kv, d_head)
                bias = old.bias.view(*groups, head_dim)
                new.bias.copy_((bias[0] if first_heads else bias[:, pick]).reshape(-1))
    return converted


SOLUTIONS["check_keep_first_kv_head"] = keep_first_kv_head


def repeated_loss_without(model, tokens, period, heads, *, layer=0, first=None, shift=1):
    """ch14: the repeated-block loss with layer 0's ``heads`` gated off (``layer``, ``first``
    and ``shift`` make the wrong answers: layer 1 gated, another first query, no shift)."""
    from attnbook.analysis.circuits import gated_forward  # the shared import line stays as is

    gates = torch.ones(2, 4)  # (L, H)
    gates[layer, heads] = 0.0
    logits, _ = gated_forward(model, tokens, gates)  # (B, T, V)
    T = tokens.size(1)
    # (B, T - 1): query t scored on token t + shift
    losses = torch.nn.functional.cross_entropy(
        logits[:, : T - 1].transpose(1, 2), tokens[:, shift : T - 1 + shift], reduction="none"
    )
    return losses[:, period + 1 if first is None else first :].mean().item()


SOLUTIONS["check_repeated_loss_without"] = repeated_loss_without


def previous_shares_slip(model, tokens, slip):
    """ch13 exercise 4's two slips: the two-back weight averaged over T - 1 queries
    (``"count"``), or the mean of the per-window ratios (``"per_window"``)."""
    with torch.no_grad():
        weights = model.attention_weights(tokens)[0]  # (B, H, T, T)
    previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (B, H, T - 1)
    two_back = weights.diagonal(offset=-2, dim1=-2, dim2=-1)  # (B, H, T - 2)
    shares = previous.mean(dim=(0, 2))  # (H,)
    if slip == "count":  # T - 2 weights two back over T - 1 queries
        return shares, shares / (two_back.sum(dim=(0, 2)) / previous[:, 0].numel())
    return shares, (previous.mean(dim=-1) / two_back.mean(dim=-1)).mean(dim=0)
