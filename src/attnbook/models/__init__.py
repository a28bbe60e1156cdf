"""Whole models and how they are trained: the tiny decoder, seq2seq, the tasks and text they learn,
training loops, the capstone and reference models, and the loaders of shipped weights."""
