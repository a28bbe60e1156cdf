"""GRU encoder-decoders with and without attention (Cho et al., 2014; Bahdanau et al., 2014).

Shapes: B batch, S input length, T output length, E embedding width, D GRU width, V vocabulary
size. The encoder turns the input into one annotation h_j (B, S, 2D) per input token plus a
summary c (B, 2D). The plain decoder reads the same c at every step; the attention decoder
computes a fresh context c_t from all annotations at every step. Nothing else differs.
"""

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnbook.core._checks import check_int, check_tensor, shape_of
from attnbook.core.masks import padding_mask
from attnbook.core.trace import record
from attnbook.layers.additive import AdditiveAttention
from attnbook.models.tasks import BOS, EOS, PAD


def check_token_ids(name: str, ids: object, layout: str, rank: int) -> None:
    """``ids`` is an integer tensor of the given rank."""
    check_tensor(name, ids, layout, rank=rank)
    if ids.dtype != torch.long:
        raise ValueError(f"{name}: expected token ids of dtype torch.long, got {ids.dtype}")


def check_lengths(lengths: object, source: Tensor) -> None:
    """``lengths`` (B,) holds one length in [1, S] per row of source (B, S)."""
    check_token_ids("source_lengths", lengths, "(B,)", rank=1)
    if len(lengths) != source.size(0):
        raise ValueError(
            f"source_lengths: expected shape (B,) with B = {source.size(0)} as in source, got "
            f"source_lengths.shape = {shape_of(lengths)}"
        )
    if lengths.min() < 1 or lengths.max() > source.size(1):
        raise ValueError(
            f"source_lengths: expected every length in [1, S = {source.size(1)}], got "
            f"{lengths.tolist()}"
        )


class EncoderOutput(NamedTuple):
    """What the decoder may read: annotations (B, S, 2D), summary (B, 2D), mask (B, S)."""

    annotations: Tensor
    summary: Tensor
    mask: Tensor


class Encoder(nn.Module):
    """A bidirectional GRU over the input tokens.

    ``forward(source (B, S), source_lengths (B,))`` returns an :class:`EncoderOutput`:
    annotation h_j = [forward state; backward state] at token j, (B, S, 2D), zero on padding;
    summary = [last forward state; first backward state], (B, 2D), the fixed-size context
    vector c of a plain encoder-decoder; and the padding mask (B, S), True = real token.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.rnn = nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)

    def forward(self, source: Tensor, source_lengths: Tensor) -> EncoderOutput:
        check_token_ids("source", source, "(B, S)", rank=2)
        check_lengths(source_lengths, source)
        embedded = self.embed(source)  # (B, S, E)
        record("embedded x", embedded, "B S E", "input token embeddings")
        packed = pack_padded_sequence(
            embedded, source_lengths.cpu(), batch_first=True, enforce_sorted=False
        )  # padding is skipped, so the backward GRU starts at each sequence's last token
        packed_states, last_states = self.rnn(packed)  # last_states: (2, B, D)
        annotations, _ = pad_packed_sequence(
            packed_states, batch_first=True, total_length=source.size(1)
        )  # (B, S, 2D)
        record("annotations h_j", annotations, "B S 2D", "both directions, one per token")
        summary = torch.cat([last_states[0], last_states[1]], dim=-1)  # (B, 2D)
        record("summary c", summary, "B 2D", "the whole input in one fixed-size vector")
        mask = padding_mask(source_lengths, source.size(1), device=source.device)  # (B, S)
        return EncoderOutput(annotations, summary, mask)


class PlainDecoder(nn.Module):
    """A GRU decoder that reads the same context vector c at every step (RNNencdec).

    ``step(prev_tokens (B,), state (B, D), memory)`` returns logits (B, V), the new state
    s_t (B, D) and None (no attention weights). ``forward(decoder_input (B, T), memory)`` runs
    T steps with the given previous tokens (teacher forcing) and returns logits (B, T, V) and
    None. ``context_dim`` is the encoder's 2D.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int, context_dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.init_state = nn.Linear(context_dim, hidden_dim)
        self.cell = nn.GRUCell(embed_dim + context_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim + context_dim, vocab_size)

    def initial_state(self, memory: EncoderOutput) -> Tensor:
        """s_0 = tanh(W_init c), (B, D)."""
        state = torch.tanh(self.init_state(memory.summary))  # (B, D)
        record("state s_0", state, "B D", "the decoder's first state, from c")
        return state

    def context(self, state: Tensor, memory: EncoderOutput) -> tuple[Tensor, Tensor | None]:
        """The context for the next step: always the summary c (B, 2D); no weights."""
        record("context c", memory.summary, "B 2D", "the same vector at every step")
        return memory.summary, None

    def step(
        self, prev_tokens: Tensor, state: Tensor, memory: EncoderOutput
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        context, weights = self.context(state, memory)  # (B, 2D), (B, S) or None
        embedded = self.embed(prev_tokens)  # (B, E)
        record("embedded y_{t-1}", embedded, "B E", "the previous output token")
        state = self.cell(torch.cat([embedded, context], dim=-1), state)  # (B, D)
        record("state s_t", state, "B D", "GRU update from y_{t-1}, context and s_{t-1}")
        logits = self.out(torch.cat([state, context], dim=-1))  # (B, V)
        record("logits", logits, "B V", "scores for the next token")
        return logits, state, weights

    def forward(self, decoder_input: Tensor, memory: EncoderOutput) -> tuple[Tensor, Tensor | None]:
        check_token_ids("decoder_input", decoder_input, "(B, T)", rank=2)
        if decoder_input.size(0) != memory.summary.size(0):
            raise ValueError(
                f"decoder_input: expected shape (B, T) with B = {memory.summary.size(0)} as in "
                f"the encoder output, got decoder_input.shape = {shape_of(decoder_input)}"
            )
        state = self.initial_state(memory)  # (B, D)
        step_logits, step_weights = [], []
        for t in range(decoder_input.size(1)):
            logits, state, weights = self.step(decoder_input[:, t], state, memory)
            step_logits.append(logits)  # T x (B, V)
            step_weights.append(weights)  # T x (B, S) or T x None
        logits = torch.stack(step_logits, dim=1)  # (B, T, V)
        record("all logits", logits, "B T V", "the T steps stacked")
        if step_weights[0] is None:
            return logits, None
        return logits, torch.stack(step_weights, dim=1)  # (B, T, S)


class AttentionDecoder(PlainDecoder):
    """The same decoder, but the context c_t is attended afresh at every step (RNNsearch).

    c_t = sum_j alpha_tj h_j with alpha_t = softmax_j(v^T tanh(W s_{t-1} + U h_j)), the
    additive attention of :class:`attnbook.AdditiveAttention`, padding masked out. ``step``
    and ``forward`` return the weights alpha: (B, S) per step, (B, T, S) for all steps.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        context_dim: int,
        attention_dim: int | None = None,
    ) -> None:
        super().__init__(vocab_size, embed_dim, hidden_dim, context_dim)
        attention_dim = hidden_dim if attention_dim is None else attention_dim
        self.attention = AdditiveAttention(hidden_dim, context_dim, attention_dim)

    def context(self, state: Tensor, memory: EncoderOutput) -> tuple[Tensor, Tensor]:
        """c_t (B, 2D) and alpha_t (B, S): the previous state s_{t-1} queries the annotations."""
        context, weights = self.attention(
            state[:, None, :], memory.annotations, memory.annotations, memory.mask[:, None, :]
        )  # (B, 1, 2D), (B, 1, S)
        return context[:, 0], weights[:, 0]  # (B, 2D), (B, S)


class Seq2Seq(nn.Module):
    """Encoder plus plain or attention decoder, the two models compared in chapter 1.

    Embeddings are ``embed_dim`` = E wide, both GRUs ``hidden_dim`` = D wide (the encoder's
    annotations 2D), the attention's hidden layer D wide.
    ``forward(source (B, S), source_lengths (B,), decoder_input (B, T))`` returns logits
    (B, T, V) and the attention weights (B, T, S), or None for the plain model.
    """

    def __init__(
        self, vocab_size: int, embed_dim: int, hidden_dim: int, *, attention: bool
    ) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size, 1)
        check_int("embed_dim", embed_dim, 1)
        check_int("hidden_dim", hidden_dim, 1)
        self.encoder = Encoder(vocab_size, embed_dim, hidden_dim)
        decoder_class = AttentionDecoder if attention else PlainDecoder
        self.decoder = decoder_class(vocab_size, embed_dim, hidden_dim, 2 * hidden_dim)

    def forward(
        self, source: Tensor, source_lengths: Tensor, decoder_input: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        memory = self.encoder(source, source_lengths)
        return self.decoder(decoder_input, memory)  # (B, T, V), (B, T, S) or None


def shift_right(target: Tensor) -> Tensor:
    """The decoder's inputs for teacher forcing: BOS, then target (B, T) without its last token."""
    bos = torch.full_like(target[:, :1], BOS)  # (B, 1)
    return torch.cat([bos, target[:, :-1]], dim=1)  # (B, T)


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq, source: Tensor, source_lengths: Tensor, max_len: int
) -> tuple[Tensor, Tensor | None]:
    """Decode ``max_len`` steps, each time feeding back the most likely token.

    Returns tokens (B, max_len), PAD after each sequence's first EOS, and the attention
    weights (B, max_len, S) (None for the plain model). No randomness: same input, same output.
    """
    check_int("max_len", max_len, 1)
    memory = model.encoder(source, source_lengths)
    state = model.decoder.initial_state(memory)  # (B, D)
    prev_tokens = torch.full_like(source[:, 0], BOS)  # (B,)
    finished = torch.zeros_like(source[:, 0], dtype=torch.bool)  # (B,)
    tokens, step_weights = [], []
    for _ in range(max_len):
        logits, state, weights = model.decoder.step(prev_tokens, state, memory)
        prev_tokens = logits.argmax(dim=-1)  # (B,)
        tokens.append(prev_tokens.masked_fill(finished, PAD))  # max_len x (B,)
        step_weights.append(weights)  # max_len x (B, S) or max_len x None
        finished = finished | (prev_tokens == EOS)
    weights = None if step_weights[0] is None else torch.stack(step_weights, dim=1)
    return torch.stack(tokens, dim=1), weights  # (B, max_len), (B, max_len, S) or None
