"""What every chapter's checkers share: the error they raise, how they call the reader's
function, compare its answer and report, and the decorator that makes a stub read as
"not attempted yet" and leaves the global random state alone."""

import functools
from collections.abc import Callable

import torch
from torch import Tensor


class ExerciseError(AssertionError):
    """The reader's answer is not right yet; the message says why."""


def _fail(message: str) -> None:
    raise ExerciseError(message)


def _succeed(message: str) -> None:
    print(f"Correct: {message}")


def _call(fn: Callable, call: str, *args):
    try:
        return fn(*args)
    except (ExerciseError, NotImplementedError):
        raise
    except Exception as error:  # the reader's code failed: say where, keep the cause attached
        raise ExerciseError(f"{call} raised {type(error).__name__}: {error}") from error


def _as_tensor(result, call: str, what: str) -> Tensor:
    if not torch.is_tensor(result):
        _fail(f"{call} should return {what}, got {type(result).__name__}")
    return result


def _check_bool_mask(result, call: str, shape: tuple[int, int]) -> Tensor:
    mask = _as_tensor(result, call, "a boolean tensor")
    if mask.dtype != torch.bool:
        _fail(f"{call} should return a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if tuple(mask.shape) != shape:
        _fail(f"{call} should return shape (T, S) = {shape}, got {tuple(mask.shape)}")
    return mask


def _first_difference(result: Tensor, expected: Tensor) -> tuple[int, int]:
    row, col = (result != expected).nonzero()[0].tolist()
    return row, col


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _close(result: Tensor, expected: Tensor, *, atol: float, rtol: float = 1e-5) -> bool:
    """Compare in float64, so an answer computed in any float dtype can be right."""
    return torch.allclose(result.double(), expected.double(), atol=atol, rtol=rtol)


def _not_attempted(fn: Callable) -> None:
    name = getattr(fn, "__name__", "your answer")
    print(
        f"Not attempted yet: {name} still raises NotImplementedError. Write its body in the "
        "cell above, run that cell, then run this check again."
    )


def _checker(check: Callable[[Callable], None]) -> Callable[[Callable], None]:
    """Run ``check`` on a fork of the global random state: the reader's state stays as it was.

    A learner's cell starts as a stub that raises ``NotImplementedError``; checking the stub
    prints that the exercise has not been attempted yet instead of failing.
    """

    @functools.wraps(check)
    def run(fn: Callable) -> None:
        with torch.random.fork_rng():
            try:
                check(fn)
            except NotImplementedError:
                _not_attempted(fn)

    return run
