"""``python -m attnbook.bench [--quick] [--threads N]``: every benchmark of the book, one run.

Prints one table a section: attention kernels (time and peak extra memory), attention
modules (time), attention for training (forward + backward, :mod:`attnbook.bench.training`),
KV-cache decoding against recomputation (:mod:`attnbook.bench.decoding`), ring attention on P
processes (:mod:`attnbook.bench.ring`), serving (paged KV memory, continuous batching;
:mod:`attnbook.bench.serving`), linear attention (:mod:`attnbook.bench.linear`), top-k attention
(:mod:`attnbook.bench.sparse`) and the Triton kernels on a GPU (:mod:`attnbook.bench.triton`),
each with its target and a met / NOT met verdict, then the total wall-clock time.
"""

import argparse
import platform
import time

import torch

from attnbook.bench import attention, decoding, linear, ring, serving, sparse, training
from attnbook.bench import triton as triton_section


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m attnbook.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (smoke test)")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch CPU threads (default 2)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    print(
        f"attnbook benchmarks{' (quick)' if args.quick else ''}: torch {torch.__version__}, "
        f"{platform.machine()}, {torch.get_num_threads()} threads\n",
        flush=True,
    )
    print(attention.format_kernels(attention.kernel_benchmark(args.quick), args.quick), flush=True)
    print(flush=True)
    print(attention.format_modules(attention.module_benchmark(args.quick), args.quick), flush=True)
    print(flush=True)
    print(training.run(args.quick), flush=True)
    print(flush=True)
    print(decoding.run(args.quick), flush=True)
    print(flush=True)
    print(ring.run(args.quick), flush=True)
    print(flush=True)
    print(serving.run(args.quick), flush=True)
    print(flush=True)
    print(linear.run(args.quick), flush=True)
    print(flush=True)
    print(sparse.run(args.quick), flush=True)
    print(flush=True)
    print(triton_section.run(args.quick), flush=True)
    print(f"\ntotal: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
