"""Run a function on P processes joined in a ``torch.distributed`` group, and collect results.

:func:`launch` starts P fresh Python processes, joins them in one process group that meets on a
free port of 127.0.0.1, calls ``fn(*args, **kwargs)`` in each and returns the P results, rank 0
first. The backend is gloo on the CPU, and nccl when CUDA is present with a device for every rank.

Processes start by ``forkserver`` where the platform has it (Linux, macOS), else by ``spawn``.
Both run the function in a clean process, never a copy of the caller (so it works the same from
a script, a test and a notebook). The fork server imports torch and the library once, on the
first launch, and forks each worker from that clean state, so later workers start in a fraction
of a second instead of importing everything again; it exits with the calling process.

Nothing may hang and nothing may be left behind: every collective has a timeout, the whole run a
deadline, a rank that raises makes :func:`launch` raise :class:`WorkerError` in the caller with
that rank's traceback (or exit code, or signal) ahead of its partners' follow-on errors, and
every child is ended and joined on every way out.
"""

import datetime
import io
import queue
import signal
import socket
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attnbook.core._checks import check_int, check_positive

COLLECTIVE_TIMEOUT_S = 60.0  # every send, receive and collective gives up after this
DEADLINE_S = 300.0  # the whole launch gives up after this
PRELOAD = ["attnbook.efficient.ring", "torch._dynamo"]  # imported once by the fork server
_POLL_S = 0.05
GRACE_S = 2.0  # after a first failure, how long the others may take to report theirs


class WorkerError(RuntimeError):
    """A rank raised (or died); the message holds the rank and its traceback as text."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pick_backend(world_size: int) -> str:
    """ "nccl" when CUDA has a device for each of ``world_size`` ranks, else "gloo"."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def rank_device() -> torch.device:
    """The device this rank computes on: its own GPU under nccl, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _check_importable(fn: object) -> None:
    """``fn`` must be a module-level function of an importable module, so that it pickles."""
    if not callable(fn):
        raise ValueError(f"fn: expected a function, got {type(fn).__name__}")
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if "<lambda>" in qualname or "<locals>" in qualname or module in (None, "__main__"):
        raise ValueError(
            f"fn: expected a function defined at the top level of an importable module (e.g. "
            f"attnbook.efficient.ring.ring_attention_demo), got {module}.{qualname}; lambdas, "
            "nested functions and functions defined in a notebook or script cannot be sent to a "
            f"worker process"
        )


def _context():
    """The forkserver context, preloaded with the library, where available; else spawn."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _to_bytes(value: object) -> bytes:
    """Serialise a result with torch.save, so tensors travel as bytes, not shared memory."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _worker(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    threads: int,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    results: "mp.Queue",
) -> None:
    """One rank: join the group, run ``fn``, report ("ok", bytes) or ("error", traceback)."""
    torch.set_num_threads(threads)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
        )
        value = fn(*args, **kwargs)
        results.put((rank, "ok", _to_bytes(value)))
    except BaseException:  # any failure, even SystemExit, goes to the parent
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _end(processes: list) -> None:
    """Terminate, then kill, every child still alive, and join them all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()


def _death(exitcode: int) -> str:
    """How a process ended, in words: its exit code, or the signal that killed it."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (exit code {exitcode}) and sent no result"
    return f"exited with code {exitcode} and sent no result"


def _failure_report(world_size: int, errors: dict[int, str], dead: dict[int, int]) -> str:
    """The first failure in full, then the others as its consequences.

    A rank that died without a word (os._exit, a signal, the OOM killer) is the likely cause
    of the others' errors ("Connection closed by peer"), so it comes first; otherwise the rank
    whose error arrived first.
    """
    failures = [
        (rank, f"rank {rank} of {world_size} {_death(code)}") for rank, code in dead.items()
    ]
    failures += [
        (rank, f"rank {rank} of {world_size} raised:\n{text}") for rank, text in errors.items()
    ]
    (first_rank, first), *others = failures
    if not others:
        return first
    consequences = "\n".join(f"--- {text}" for _, text in others)
    return (
        f"{first}\n\nThen, probably as consequences of rank {first_rank}'s failure:\n{consequences}"
    )


def _collect(processes: list, results: "mp.Queue", deadline: float) -> list:
    """Each rank's result, rank order; at the first failure or death, raise WorkerError.

    After the first failure the other ranks get ``GRACE_S`` seconds to report or end, so that
    the report can name the rank that failed first rather than a partner that lost it.
    """
    world_size = len(processes)
    collected: dict[int, object] = {}
    errors: dict[int, str] = {}  # rank -> traceback, in order of arrival
    dead: dict[int, int] = {}  # rank -> exit code, for ranks that ended without a message
    grace_end = None
    while len(collected) + len(errors) + len(dead) < world_size:
        now = time.monotonic()
        if grace_end is not None and now > grace_end:
            break
        if grace_end is None and now > deadline:
            missing = sorted(set(range(world_size)) - set(collected))
            raise TimeoutError(f"launch: ranks {missing} did not finish before the deadline")
        try:
            rank, status, payload = results.get(timeout=_POLL_S)
        except queue.Empty:
            for rank, process in enumerate(processes):
                reported = rank in collected or rank in errors or rank in dead
                if not reported and process.exitcode is not None:
                    time.sleep(_POLL_S)  # its last message may still be in the pipe
                    if results.empty():
                        dead[rank] = process.exitcode
            if dead and grace_end is None:
                grace_end = time.monotonic() + GRACE_S
            continue
        if status == "error":
            errors[rank] = payload
            grace_end = grace_end or time.monotonic() + GRACE_S
        else:
            collected[rank] = torch.load(io.BytesIO(payload), weights_only=False)
    if errors or dead:
        raise WorkerError(_failure_report(world_size, errors, dead))
    return [collected[rank] for rank in range(world_size)]


def launch(
    fn: Callable,
    world_size: int,
    *args: object,
    backend: str | None = None,
    threads: int = 1,
    deadline_s: float = DEADLINE_S,
    **kwargs: object,
) -> list:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` processes; return their results by rank.

    Each process joins a ``torch.distributed`` group (gloo, or nccl when every rank has a GPU;
    ``backend`` overrides) as rank 0 .. world_size - 1, so ``fn`` can call
    ``dist.get_rank()``, send, receive and all-gather; every such call times out after
    ``COLLECTIVE_TIMEOUT_S`` seconds. ``threads``: PyTorch CPU threads per process.

    ``fn`` must be defined at the top level of an importable module (e.g. in ``attnbook``), not
    in a notebook, a script's ``__main__`` or a lambda: a worker process imports it by name.
    Arguments and results are pickled (tensors included); results travel as bytes.

    Raises :class:`WorkerError` if any rank raises or dies: it names the rank that failed first
    (a rank that died: its exit code or signal; else the first traceback to arrive), then the
    other ranks' errors as its likely consequences. Raises
    ``TimeoutError`` after ``deadline_s`` seconds; in every case all children are ended and
    joined before :func:`launch` returns or raises.
    """
    _check_importable(fn)
    check_int("world_size", world_size)
    check_int("threads", threads)
    check_positive("deadline_s", deadline_s)
    backend = pick_backend(world_size) if backend is None else backend
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: expected 'gloo' or 'nccl', got {backend!r}")
    context = _context()
    results = context.Queue()
    port = free_port()
    processes = []
    deadline = time.monotonic() + deadline_s
    try:
        for rank in range(world_size):
            worker_args = (rank, world_size, port, backend, threads, fn, args, kwargs, results)
            process = context.Process(target=_worker, args=worker_args, daemon=True)
            process.start()
            processes.append(process)
        return _collect(processes, results, deadline)
    finally:
        _end(processes)
        results.close()
        results.join_thread()


__all__ = ["COLLECTIVE_TIMEOUT_S", "WorkerError", "launch", "pick_backend", "rank_device"]
