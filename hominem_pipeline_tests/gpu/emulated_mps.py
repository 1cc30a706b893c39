"""An Apple GPU for the CPU dry-run (`scripts/device_check.sh dry-run mps`): a device that torch cannot tell
from a GPU, whose tensors hold their values in CPU tensors, with the Apple GPU's rules.

- A tensor is on the device (`tensor.device.type == "applegpu"`) until the code moves it back (`.cpu()`,
  `.to("cpu")`); `.numpy()` of one fails, as on any GPU.
- No float64 there: creating, computing or moving a float64 tensor on it raises as the Apple GPU's torch does
  ("MPS framework doesn't support float64").
- An operation mixing the device's tensors with CPU tensors (other than a 0-d scalar, a copy, or an index) raises,
  as on any GPU.
- `runtime.device: mps` resolves to it, and `mps_available()` says yes; so a stage placed by the setting lands here.

Built on torch's Python backend for the PrivateUse1 key (`_setup_privateuseone_for_python_backend`, which
registers a device guard, so autograd, optimizers and threads work as on a real device), renamed `applegpu`
(torch keeps the name `mps` for its own backend). What it cannot check: which operations the Apple GPU lacks
(the package sets PYTORCH_ENABLE_MPS_FALLBACK on a Mac for those) and its numerics; a Mac runs the same tests
on the real device (`bash scripts/device_check.sh mac`).
"""

from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_map

NAME = "applegpu"
DEVICE: torch.device  # set by `install`, which registers the name
NO_FLOAT64 = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. Please use float32 "
    "instead. (emulated Apple GPU, in {op})"
)
# operations that take CPU tensors beside the device's on a real GPU
MIXED_OK = {"copy_", "_to_copy", "index", "index_put_", "_index_put_impl_", "index_put", "lift_fresh", "set_"}
_installed = False
_library = None  # the fallback's registration, which lasts as long as the object


class OnDevice(torch.Tensor):
    """A tensor on the emulated device: its values in `inner`, a CPU tensor."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> OnDevice:
        if inner.dtype == torch.float64:
            raise TypeError(NO_FLOAT64.format(op="a float64 tensor placed on it"))
        # a normal tensor even in inference mode: autograd's view tracking above this layer sets a view's version
        # counter, which an inference tensor refuses
        with torch.inference_mode(False):
            made = torch.Tensor._make_wrapper_subclass(
                cls,
                inner.size(),
                strides=inner.stride(),
                storage_offset=inner.storage_offset(),
                dtype=inner.dtype,
                layout=inner.layout,
                device=DEVICE,
                requires_grad=inner.requires_grad,
            )
        made.inner = inner
        return made

    def __repr__(self) -> str:
        return f"{self.inner!r} (on {DEVICE})"

    def tolist(self):  # as a GPU tensor's: copied to the host
        return self.inner.tolist()

    def untyped_storage(self):  # what libraries read to find tensors sharing memory (safetensors, PEFT)
        return self.inner.untyped_storage()

    def data_ptr(self) -> int:
        return self.inner.data_ptr()

    def numpy(self, *, force: bool = False):
        raise TypeError(
            f"can't convert {DEVICE} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory "
            "first."
        )

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})


def _here(device) -> bool:
    return device is not None and torch.device(device).type == NAME


def _run(func, args, kwargs):
    """`func` on the CPU tensors behind the device's; what it returns is on the device unless it moved off."""
    to_device = _here(kwargs.get("device")) or any(isinstance(a, torch.device) and _here(a) for a in args)
    if to_device:  # the op runs on the CPU, and what it makes goes on the device
        args = tuple(torch.device("cpu") if isinstance(a, torch.device) and _here(a) else a for a in args)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": torch.device("cpu")}
    given: dict[int, torch.Tensor] = {}  # id of what the op sees -> what the caller passed
    placed, plain = [], []

    def unwrap(t):
        if isinstance(t, OnDevice):
            placed.append(t)
            given[id(t.inner)] = t
            return t.inner
        if isinstance(t, torch.Tensor):
            plain.append(t)
            given[id(t)] = t
        return t

    args, kwargs = tree_map(unwrap, (args, kwargs))
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    moves = kwargs.get("device") is not None or any(isinstance(a, torch.device) for a in args)
    leaving = name in ("_to_copy", "to") and moves and not to_device
    if placed and name not in MIXED_OK and any(t.dim() > 0 for t in plain):
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE} and cpu! "
            f"(emulated Apple GPU, in {name}, with CPU tensors of shapes {[tuple(t.shape) for t in plain]})"
        )
    out = func(*args, **kwargs)
    resized = [t for t in placed if t.shape != t.inner.shape]
    if resized:  # a wrapper's shape is fixed when made: `torch.arange` and the like are built on the CPU instead
        raise NotImplementedError(f"{name} resized a tensor on the emulated Apple GPU in place ({resized[0].shape})")
    if leaving:  # a copy on the host, as from a GPU, never the values behind the device's tensor
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) and id(t) in given else t, out)
    if not (to_device or placed):
        return out

    def wrap(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) in given:  # an in-place op gives back what it was handed
            return given[id(t)]
        if t.dtype == torch.float64:
            raise TypeError(NO_FLOAT64.format(op=name))
        return OnDevice(t)

    return tree_map(wrap, out)


def _fallback(op, *args, **kwargs):
    return _run(op, args, kwargs)


def _built_on_the_cpu(make):
    """`make` (`torch.tensor`, `as_tensor`, `arange`), placing on the device by a copy: torch builds the first two
    with the Python dispatch key excluded, which a Python backend cannot serve, and `arange` resizes what it
    made (a wrapper's shape is fixed)."""

    @functools.wraps(make)
    def built(*args, **kwargs):
        if not _here(kwargs.get("device")):
            return make(*args, **kwargs)
        return make(*args, **{**kwargs, "device": None}).to(DEVICE)

    return built


def install() -> torch.device:
    """Register the device (once per process) and send `runtime.device: mps` there; returns it."""
    global _installed, _library, DEVICE
    if _installed:
        return DEVICE
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from hominem_pipeline.core.lm import device as device_policy

    _setup_privateuseone_for_python_backend(NAME)
    DEVICE = torch.device(NAME, 0)
    _library = torch.library.Library("_", "IMPL")
    _library.fallback(_fallback, "PrivateUse1")
    resolve = device_policy.resolve_device

    def resolve_device(setting: str | None = "auto") -> torch.device:
        placed = resolve(setting)
        return DEVICE if placed.type == "mps" else placed

    from torch.utils._device import _device_constructors

    _device_constructors()  # cached with torch's own functions, which `with torch.device(...)` recognises
    for name in ("tensor", "as_tensor", "arange"):
        setattr(torch, name, _built_on_the_cpu(getattr(torch, name)))
    device_policy.mps_available = lambda: True
    device_policy.resolve_device = resolve_device
    _installed = True
    return DEVICE
