"""The mechanism: input checks, masks, scores, the attention function, heads, positions, KV caches,
shape traces, the memory meter and devices. Imports nothing from the rest of attnbook."""
