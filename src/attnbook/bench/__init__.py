"""Benchmarks for the book's attention code: run them with ``python -m attnbook.bench``."""
