"""The one way the fused decoder and flow launch their Triton kernels.

Each launch helper (:func:`~engines.torch_vits.fused_conv.resconv`, ``postconv_pcm``,
``upsample``, :func:`~engines.torch_vits.fused_wn.wn_layer`) builds a :class:`KernelLaunch`
(the jitted kernel, its grid, its arguments, its constexprs and launch options) and hands it to
:func:`launch`. Normally that launches it. Inside :func:`observe`, the calling thread's launches
are also passed to a callback first, and with ``run=False`` not launched at all: that is how
:mod:`engines.torch_vits.precompile` learns which kernel specializations a stage-B pass launches
(it runs the pass with the kernels left out, then asks Triton to compile exactly those
launches), and how the tests record what a real pass launched.

Triton compiles one binary per *specialization* of a kernel: the values of its ``constexpr``
arguments and launch options, the element type of each pointer, whether each pointer is
16-byte aligned, and for each integer argument whether it is 1 and whether it is divisible by 16
(``triton/backends/compiler.py``, ``BaseBackend.get_int_specialization`` /
``get_tensor_specialization``). :func:`launch_key` describes a launch at least that finely.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple


def pow2(n: int, least: int = 1) -> int:
    """The smallest power of two >= ``n`` and >= ``least``: a kernel tile's width (``tl.arange`` takes
    powers of two only)."""
    return max(least, 1 << max(0, int(n) - 1).bit_length())


class KernelLaunch(NamedTuple):
    """One launch of a jitted Triton kernel: ``kernel[grid](*args, **options)``."""

    kernel: Any
    grid: tuple
    args: tuple
    options: dict  # constexpr arguments by name, and num_warps / num_stages

    @property
    def name(self) -> str:
        return getattr(getattr(self.kernel, "fn", self.kernel), "__name__", type(self.kernel).__name__)

    def run(self):
        return self.kernel[self.grid](*self.args, **self.options)

    def warmup(self):
        """Compile (or load from Triton's caches) this launch's specialization without launching it:
        Triton's own ``JITFunction.warmup``, which binds the same arguments the same way as a launch."""
        return self.kernel.warmup(*self.args, grid=self.grid, **self.options)


#: thread id -> (callback, run) for the threads inside :func:`observe`; a plain global dict (empty but
#: while observing) rather than a ContextVar, so that code traced by torch.compile sees a constant.
_observers: dict[int, tuple[Callable[[KernelLaunch], Any], bool]] = {}


def launch(kl: KernelLaunch) -> None:
    """Launch ``kl``, or, inside :func:`observe` on this thread, show it to the callback first (and
    launch it only when the observer was opened with ``run=True``)."""
    obs = _observers.get(threading.get_ident()) if _observers else None
    if obs is not None:
        obs[0](kl)
        if not obs[1]:
            return
    kl.run()


@contextmanager
def observe(callback: Callable[[KernelLaunch], Any], *, run: bool = True):
    """Pass every kernel launch of the calling thread to ``callback`` while inside; with
    ``run=False`` the kernels are not launched (their outputs stay uninitialized). Launches of
    other threads go on as usual; an observer cannot be nested in another on the same thread."""
    me = threading.get_ident()
    if me in _observers:
        raise RuntimeError("this thread's kernel launches are already being observed")
    _observers[me] = (callback, run)
    try:
        yield
    finally:
        del _observers[me]


def _arg_key(a) -> tuple:
    if hasattr(a, "data_ptr") and hasattr(a, "dtype"):
        return ("tensor", str(a.dtype), a.data_ptr() % 16 == 0)
    if a is None or isinstance(a, (bool, int, float, str)):
        return (type(a).__name__, a)
    return (type(a).__name__, repr(a))


def launch_key(kl: KernelLaunch) -> tuple:
    """A hashable description of what Triton compiles ``kl`` as, at least as fine as Triton's own:
    the kernel, each tensor argument's dtype and 16-byte alignment, every scalar argument's value
    (Triton only distinguishes 1, multiples of 16 and 32/64-bit), and the constexprs and options.
    The grid (batch rows, time blocks) is not part of it: it changes no compiled code."""
    return (kl.name, id(kl.kernel), tuple(_arg_key(a) for a in kl.args),
            tuple(sorted((k, _arg_key(v)) for k, v in kl.options.items())))
