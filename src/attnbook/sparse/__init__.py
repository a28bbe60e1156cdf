"""Attention that picks its keys: each query reads a few keys chosen for it, then runs ordinary
softmax attention over those only.

- :mod:`~attnbook.sparse.topk`: attention over the keys a table of indices names (the common
  core), and the boolean mask those indices mean;
- :mod:`~attnbook.sparse.moba`: MoBA, top-k blocks scored by their mean key;
- :mod:`~attnbook.sparse.indexer`: DeepSeek's lightning indexer, its top-k token choice, the
  warm-up loss and recall of the dense top k;
- :mod:`~attnbook.sparse.layers`: self-attention layers that select with MoBA or an indexer;
- :mod:`~attnbook.sparse.nsa`: Native Sparse Attention's three branches and their gates.
- :mod:`~attnbook.sparse.tiles`: the tiles a fused kernel computes for a per-query block choice.

Every method equals dense attention under the mask of the keys it picked: the tests check that
first, in float64.
"""
