"""Chapter 1's exercise checkers: the parameters that attention adds to the encoder-decoder."""

from collections.abc import Callable

from attnbook.exercises._common import _call, _checker, _fail, _succeed
from attnbook.models.seq2seq import Seq2Seq

# Chapter 1: the parameters that attention adds to the encoder-decoder.


@_checker
def check_attention_parameter_count(fn: Callable[[int], int]) -> None:
    """``fn(D)``: how many more parameters ``Seq2Seq(attention=True)`` has than the plain one."""
    for width in (4, 16, 32):
        call = f"attention_parameter_count({width})"
        answer = _call(fn, call, width)
        if isinstance(answer, bool) or not isinstance(answer, int):
            _fail(f"{call} should return a whole number (int), got {answer!r}")
        models = [Seq2Seq(11, 8, width, attention=flag) for flag in (True, False)]
        counts = [sum(p.numel() for p in model.parameters()) for model in models]
        expected = counts[0] - counts[1]
        if answer != expected:
            hints = {
                -width * width: "U maps the encoder's 2D-wide states (both directions), so it "
                "is D x 2D, not D x D",
                2 * width: "attention's W and U have no biases here",
                3 * width: "attention's W, U and v have no biases here",
                -width: "v has D entries: it turns the D-wide tanh into one score",
            }
            if answer - expected in hints:
                _fail(
                    f"{call} returned {answer}, but the attention model has {expected} more "
                    f"parameters than the plain one: {hints[answer - expected]}"
                )
            _fail(
                f"{call} returned {answer}, but the attention model has {expected} more "
                f"parameters than the plain one (off by {answer - expected}): count the entries "
                f"of W (D x D), U (D x 2D) and v (D) again, with no biases"
            )
    _succeed("W, U and v add 3 D^2 + D parameters")
