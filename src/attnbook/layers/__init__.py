"""Attention layers built on core: additive (Bahdanau), multi-head and grouped-query, latent (MLA),
sinks, and the conversion of a multi-head layer to grouped-query."""
