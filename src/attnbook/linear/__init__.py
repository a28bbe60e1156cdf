"""Attention with a fixed-size memory: linear attention, the (gated) delta rule, Gated DeltaNet."""
