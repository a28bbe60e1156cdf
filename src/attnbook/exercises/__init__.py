"""Checkers for the chapters' exercises: each takes the reader's function and tests it.

A checker prints one line starting with ``Correct:`` when the function is right, and one
starting with ``Not attempted yet:`` when it is still the chapter's stub (it raises
``NotImplementedError``). When it is wrong, it raises :class:`ExerciseError` (an
``AssertionError``) whose message says in plain words what is wrong, for example
``window_mask(6, 2): row 3 may attend to key 5, which is in its future``. Checkers never
change the reader's function or the global random state.

Guide for a new checker: name it ``check_<what the reader writes>(fn)``; call ``fn`` on a few
small cases, including edge cases; compare with a reference computed here; for the first
difference, raise :func:`_fail` with a sentence naming the call, the row or head, and the rule
it breaks; end with :func:`_succeed`. Test it in ``tests/test_exercises.py``: its reference
answer in ``tests/exercise_answers.py``, and at least three plausible mistakes in
``WRONG_ANSWERS``, each with the words its hint must contain.
"""

from attnbook.exercises._common import ExerciseError
from attnbook.exercises.ch00 import check_query_magnitude, check_window_mask
from attnbook.exercises.ch01 import check_attention_parameter_count
from attnbook.exercises.ch02 import check_concat_scores, check_scale_for
from attnbook.exercises.ch03 import (
    check_is_equivariant,
    check_largest_length,
    check_zero_query_output,
)
from attnbook.exercises.ch04 import check_prefix_lm_mask
from attnbook.exercises.ch05 import check_head_projection, check_without_head
from attnbook.exercises.ch06 import check_keep_first_kv_head, check_repeat_kv
from attnbook.exercises.ch07 import check_alibi_slopes, check_rope_halves
from attnbook.exercises.ch08 import check_preallocated_kv_cache
from attnbook.exercises.ch09 import check_attention_backward, check_online_logsumexp
from attnbook.exercises.ch10 import check_merge_partials
from attnbook.exercises.ch11 import check_latent_scores
from attnbook.exercises.ch12 import check_cache_bytes_per_token, check_start_of_word_weight
from attnbook.exercises.ch13 import (
    check_head_importance,
    check_previous_share,
    check_previous_shares,
    check_supported_orderings,
)
from attnbook.exercises.ch14 import (
    check_find_circuit,
    check_induction_share,
    check_repeated_loss_without,
)
from attnbook.exercises.ch15 import (
    check_receptive_field,
    check_sink_weights,
    check_sink_window_mask,
)
from attnbook.exercises.ch16 import (
    check_causal_flash,
    check_causal_tile_kind,
    check_delta_rows,
    check_dq_kernel,
    check_flash_exp2,
)
from attnbook.exercises.ch17 import (
    check_beam_blocks,
    check_block_hashes,
    check_gather_keys,
    check_paged_slots,
)
from attnbook.exercises.ch18 import (
    check_chunk_end_state,
    check_delta_rule_step,
    check_erase_gain,
    check_orthonormal_keys,
)
from attnbook.exercises.ch19 import check_indexer_crossover, check_moba_choice, check_recall

__all__ = [
    "ExerciseError",
    "check_alibi_slopes",
    "check_attention_backward",
    "check_attention_parameter_count",
    "check_beam_blocks",
    "check_block_hashes",
    "check_cache_bytes_per_token",
    "check_start_of_word_weight",
    "check_causal_tile_kind",
    "check_causal_flash",
    "check_flash_exp2",
    "check_delta_rows",
    "check_dq_kernel",
    "check_concat_scores",
    "check_delta_rule_step",
    "check_erase_gain",
    "check_chunk_end_state",
    "check_find_circuit",
    "check_gather_keys",
    "check_head_importance",
    "check_head_projection",
    "check_induction_share",
    "check_largest_length",
    "check_is_equivariant",
    "check_keep_first_kv_head",
    "check_zero_query_output",
    "check_latent_scores",
    "check_merge_partials",
    "check_moba_choice",
    "check_online_logsumexp",
    "check_orthonormal_keys",
    "check_paged_slots",
    "check_preallocated_kv_cache",
    "check_prefix_lm_mask",
    "check_previous_share",
    "check_previous_shares",
    "check_receptive_field",
    "check_recall",
    "check_repeat_kv",
    "check_rope_halves",
    "check_scale_for",
    "check_sink_weights",
    "check_sink_window_mask",
    "check_indexer_crossover",
    "check_supported_orderings",
    "check_window_mask",
    "check_query_magnitude",
    "check_without_head",
    "check_repeated_loss_without",
]
