"""Attention that never holds the whole score matrix: tiled attention (forward and backward) and
ring attention across processes, with the launcher that runs them."""
