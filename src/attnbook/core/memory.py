"""A meter for the memory a computation allocates: the bytes of the tensors it creates.

:class:`TensorMemoryMeter` measures the bytes of the tensors that PyTorch operations create
inside a ``with`` block, inputs excluded, and reports the peak: deterministic on any device,
because it counts tensors rather than asking the operating system. It is built on PyTorch's
dispatcher hooks (``TorchDispatchMode``), which are public in use but live in private modules.
"""

import weakref

from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class TensorMemoryMeter(TorchDispatchMode):
    """Peak bytes of the tensors created by PyTorch operations inside the ``with`` block.

    Every operation run in the block is seen on its way through PyTorch's dispatcher. Each
    tensor it returns in new memory is counted (``numel * element_size`` of its storage) until
    the last tensor using that memory is freed; views and in-place results of existing memory
    add nothing; tensors that existed before the block (the inputs) are not counted. So
    ``peak_bytes`` is the most memory the block's own tensors held at one time: the *extra*
    memory of the computation, the same on every run and every machine.

    What it cannot see: scratch memory a single fused kernel allocates and frees inside itself
    (PyTorch's fused attention keeps a few small per-thread blocks there), and the allocator's
    own overhead. ``live_bytes`` is what is still held when read.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._users: dict[int, int] = {}  # storage address -> number of live tensors using it
        self._sizes: dict[int, int] = {}  # storage address -> bytes

    def _release(self, address: int) -> None:
        self._users[address] -= 1
        if self._users[address] == 0:
            self.live_bytes -= self._sizes.pop(address)
            del self._users[address]

    def _track(self, tensor: Tensor, input_addresses: set[int], input_ids: set[int]) -> None:
        if id(tensor) in input_ids:
            return  # an in-place operation handed back its own input
        storage = tensor.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        if size == 0:
            return
        if address in input_addresses and address not in self._sizes:
            return  # a view of memory from before the block
        if address not in self._sizes:
            self._sizes[address] = size
            self._users[address] = 0
            self.live_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self._users[address] += 1
        weakref.finalize(tensor, self._release, address)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = [x for x in tree_flatten((args, kwargs or {}))[0] if isinstance(x, Tensor)]
        input_addresses = {x.untyped_storage().data_ptr() for x in inputs}
        input_ids = {id(x) for x in inputs}
        result = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(result)[0]:
            if isinstance(tensor, Tensor) and tensor.device.type != "meta":
                self._track(tensor, input_addresses, input_ids)
        return result
