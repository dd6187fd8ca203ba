"""A compiled module's init runs with SIGINT, SIGTERM and SIGHUP held; they are delivered once it returns.

In a command, the three signals raise KeyboardInterrupt where the main thread is (`flows.stop_signals`). Raised
inside a compiled module's init, which calls back into Python (duckdb's pybind11 init runs ~0.1 s and imports
Python modules), the interrupt does not come out as one: sent into `import duckdb` at varied moments, the
process aborted (SIGABRT, no line, exit 134 or -6), the import went on as if nothing came (the signal lost), or
it failed with "ImportError: Encountered an error while initializing the extension". Held for the init's
fraction of a second, the signal then stops the command as it would have a moment later.

Only the `harvest` process holds them (installed when its command starts), and only in the main thread, where
Python runs signal handlers. The loader stays an `ExtensionFileLoader` (a subclass), so a module's `__loader__`
and `__spec__` look, compare, copy and pickle as Python's own.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterable, Iterator
from importlib.abc import MetaPathFinder
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from types import FrameType, ModuleType
from typing import Any

_held_signals: frozenset[int] = frozenset()
"""The signals held around a compiled module's init (those harvest takes in this process)."""
_came_in_create: dict[str, list[int]] = {}
"""Signals that came while a module was created, delivered once it is executed too: in between, importlib has
not registered the module yet, and an interrupt there leaves a half-made module in `sys.modules`."""


@contextlib.contextmanager
def _held(came: list[int]) -> Iterator[None]:
    """The held signals recorded into `came` meanwhile; handlers set meanwhile by the init are kept."""

    def record(signum: int, frame: FrameType | None) -> None:
        came.append(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in _held_signals:
            if signal.getsignal(sig) is not None:  # None: set from C, which Python could not put back
                previous[sig] = signal.signal(sig, record)
    except ValueError:  # not the main thread: its signals are not handled here
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is record:
                signal.signal(sig, handler)


def _deliver(came: list[int]) -> None:
    """Each signal to the handler of the moment, as if it came now. Called, not sent again: a loop's
    `add_signal_handler` already had it through the wakeup descriptor when it came."""
    for sig in came:
        handler = signal.getsignal(sig)
        if callable(handler):
            handler(sig, None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(sig)


class _HeldLoader(ExtensionFileLoader):
    def create_module(self, spec: ModuleSpec) -> ModuleType:
        came: list[int] = []
        try:
            with _held(came):
                module = super().create_module(spec)
        except BaseException:
            _deliver(came)
            raise
        if came:
            _came_in_create.setdefault(spec.name, []).extend(came)
        return module

    def exec_module(self, module: ModuleType) -> None:
        came = _came_in_create.pop(module.__name__, [])
        try:
            with _held(came):
                super().exec_module(module)
        finally:
            _deliver(came)


class _CompiledModules(MetaPathFinder):
    """Python's path finder, in its place, with a compiled module's loader holding the signals around its init."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is ExtensionFileLoader:
            spec.loader = _HeldLoader(spec.loader.name, spec.loader.path)
        return spec


def hold_signals(signals: Iterable[int]) -> None:
    """From now on in this process, `signals` wait while a compiled module initialises."""
    global _held_signals
    _held_signals = frozenset(signals)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CompiledModules)]
    if _held_signals:
        place = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
        sys.meta_path.insert(place, _CompiledModules())
