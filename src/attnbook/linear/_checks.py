"""Input checks of the linear-attention functions: shapes (B, H, T, d) and the gates' ranges."""

from torch import Tensor

from attnbook.core._checks import check_floating, check_same_dtype, check_tensor, shape_of

QK_LAYOUT = "(B, H, T, d_k)"
V_LAYOUT = "(B, H, T, d_v)"


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """q and k (B, H, T, d_k), v (B, H, T, d_v): floating, one dtype, the same B, H and T."""
    check_tensor("q", q, QK_LAYOUT, rank=4)
    check_tensor("k", k, QK_LAYOUT, rank=4)
    check_tensor("v", v, V_LAYOUT, rank=4)
    check_floating("q", q)
    check_same_dtype("k", k, q, "q")
    check_same_dtype("v", v, q, "q")
    if k.shape != q.shape:
        raise ValueError(f"k: expected the shape of q {shape_of(q)}, got {shape_of(k)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v: expected (B, H, T, d_v) with B, H, T = {tuple(q.shape[:3])} as in q, got "
            f"v.shape = {shape_of(v)}"
        )


def check_gate(name: str, gate: object, q: Tensor, low_open: bool) -> None:
    """``gate`` (B, H, T) in (0, 1] (``low_open``, alpha) or in [0, 1] (beta); NaN is refused."""
    expected = tuple(q.shape[:3])
    if not isinstance(gate, Tensor):
        raise ValueError(f"{name}: expected a tensor of shape (B, H, T), got {type(gate).__name__}")
    if tuple(gate.shape) != expected:
        raise ValueError(
            f"{name}: expected shape (B, H, T) = {expected} as in q, got {name}.shape = "
            f"{shape_of(gate)}"
        )
    check_same_dtype(name, gate, q, "q")
    inside = ((gate > 0) if low_open else (gate >= 0)) & (gate <= 1)
    if gate.numel() and not bool(inside.all()):
        interval = "(0, 1]" if low_open else "[0, 1]"
        bad = gate[~inside]
        raise ValueError(
            f"{name}: expected every value in {interval}, got {bad.numel()} outside, e.g. "
            f"{bad[0].item()!r} (values from {gate.min().item()!r} to {gate.max().item()!r})"
        )


def check_state(state: object, q: Tensor, v: Tensor) -> None:
    """An initial state (B, H, d_k, d_v) matching q and v."""
    expected = (*q.shape[:2], q.size(-1), v.size(-1))
    if not isinstance(state, Tensor):
        raise ValueError(
            f"initial_state: expected a tensor of shape (B, H, d_k, d_v), got "
            f"{type(state).__name__}"
        )
    if tuple(state.shape) != expected:
        raise ValueError(
            f"initial_state: expected shape (B, H, d_k, d_v) = {expected}, got "
            f"initial_state.shape = {shape_of(state)}"
        )
    check_same_dtype("initial_state", state, q, "q")
