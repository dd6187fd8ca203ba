"""A compiled module's init runs with SIGINT, SIGTERM and SIGHUP held; they are delivered once it returns.

In a command, the three signals raise KeyboardInterrupt where the main thread is (`flows.stop_signals`). Raised
inside a compiled module's init, which calls back into Python (duckdb's pybind11 init runs ~0.1 s and builds its
enums in Python), the interrupt does not come out as one: sent into `import duckdb` at varied moments, the
process aborted (SIGABRT, no line, exit 134 or -6), the import went on as if nothing came (the signal lost), or
it failed with "ImportError: Encountered an error while initializing the extension". Held for the init's
fraction of a second, the signal then stops the command as it would have a moment later.

Only the `harvest` process holds them (installed when its command starts), and only in the main thread, where
Python runs signal handlers.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterable, Iterator
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from types import FrameType, ModuleType
from typing import Any


class _Held:
    """The signals that came while held, each once, in the order they came."""

    def __init__(self) -> None:
        self.came: list[int] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if signum not in self.came:
            self.came.append(signum)


@contextlib.contextmanager
def _held(signals: frozenset[int]) -> Iterator[None]:
    held = _Held()
    previous: dict[int, Any] = {}
    try:
        for sig in signals:
            previous[sig] = signal.signal(sig, held)
    except ValueError:  # not the main thread: its signals are not handled here
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set from C, which Python cannot put back
                signal.signal(sig, handler)
        for sig in held.came:
            signal.raise_signal(sig)  # to the handler of the moment, as if it came now


class _HeldLoader(Loader):
    def __init__(self, loader: Loader, signals: frozenset[int]) -> None:
        self._loader = loader
        self._signals = signals

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        with _held(self._signals):
            return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with _held(self._signals):
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's surface (get_filename, is_package)
        return getattr(self._loader, name)


class _CompiledModules(MetaPathFinder):
    """Python's path finder, in its place, with a compiled module's loader holding the signals around its init."""

    def __init__(self, signals: frozenset[int]) -> None:
        self.signals = signals

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and isinstance(spec.loader, ExtensionFileLoader):
            spec.loader = _HeldLoader(spec.loader, self.signals)
        return spec


def hold_signals(signals: Iterable[int]) -> None:
    """From now on in this process, `signals` wait while a compiled module initialises."""
    held = frozenset(signals)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CompiledModules)]
    if held:
        place = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
        sys.meta_path.insert(place, _CompiledModules(held))
