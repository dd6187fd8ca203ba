"""Timestamps for `bench/timeline.py`: loaded into harvest and its temporary server through PYTHONPATH.

Each event is one line `<unix time> <pid> <label>` appended to $HARVEST_TIMELINE_FILE. Only the bench uses it.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import threading
import time
from typing import Any

_FILE = os.environ.get("HARVEST_TIMELINE_FILE")
_WATCHED = {
    "prefect",
    "prefect.flows",
    "harvest.flows.collect",
    "harvest.flows.orchestrator.temporary_server",
    "harvest.flows.commands.run_job",
    "harvest.flows.commands.run_report",
    "prefect.client.base",
    "prefect.flow_engine",
    "prefect.server.api.server",
    "uvicorn",
    "uvicorn.lifespan.on",
    "prefect.server.database.alembic_commands",
    "prefect.server.services.base",
}


def mark(label: str) -> None:
    if not _FILE:
        return
    fd = os.open(_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.4f} {os.getpid()} {label}\n".encode())
        if os.environ.get("HARVEST_TIMELINE_STDERR"):
            os.write(2, f"MARK {time.time():.4f} {label}\n".encode())
    finally:
        os.close(fd)


def _timed(fn: Any, label: str) -> Any:
    if inspect.iscoroutinefunction(fn):

        async def timed_async(*a: Any, **k: Any) -> Any:
            mark(f"{label} begin")
            try:
                return await fn(*a, **k)
            finally:
                mark(f"{label} end")

        return timed_async

    def timed(*a: Any, **k: Any) -> Any:
        mark(f"{label} begin")
        try:
            return fn(*a, **k)
        finally:
            mark(f"{label} end")

    return timed


def _patch(module: Any) -> None:
    name = module.__name__
    if name == "harvest.flows.orchestrator.temporary_server":
        cls = module.TemporaryServer
        for meth in ("__init__", "wait_ready", "stop"):
            cls_fn = getattr(cls, meth)

            def wrapped(self: Any, *a: Any, _f: Any = cls_fn, _m: str = meth, **k: Any) -> Any:
                mark(f"harvest: TemporaryServer.{_m} begin")
                try:
                    return _f(self, *a, **k)
                finally:
                    mark(f"harvest: TemporaryServer.{_m} end")

            setattr(cls, meth, wrapped)
    elif name == "harvest.flows.collect":
        for fname in (
            "run_collect",
            "_collect_job",
            "plan",
            "begin",
            "crash_stale",
            "load_earlier",
            "write_manifest",
            "_collect",
            "_fan_out",
            "write_end_manifest",
            "load_run",
            "export_step",
            "tell_the_end",
        ):
            # a step renamed since is named in the timeline, not a crash in harvest
            if hasattr(module, fname):
                setattr(module, fname, _timed(getattr(module, fname), f"harvest: {fname}"))
            else:
                mark(f"harvest: {fname} not found in flows.collect (renamed?)")
    elif name == "prefect.server.api.server":
        create_app = module.create_app

        def timed_create_app(*a: Any, **k: Any) -> Any:
            mark("server: create_app begin")
            app = create_app(*a, **k)
            mark("server: create_app end")

            async def marked(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] not in ("http", "websocket"):
                    return await app(scope, receive, send)
                label = f"server: {scope['type']} {scope.get('method', '')} {scope['path']}"
                mark(f"{label} begin")
                try:
                    return await app(scope, receive, send)
                finally:
                    mark(f"{label} end")

            return marked

        module.create_app = timed_create_app
    elif name == "prefect.client.base":
        cls = module.PrefectHttpxAsyncClient
        send = cls.send

        async def timed_send(self: Any, request: Any, *a: Any, **k: Any) -> Any:
            label = f"harvest: http {request.method} {request.url.path}"
            mark(f"{label} begin")
            try:
                return await send(self, request, *a, **k)
            finally:
                mark(f"{label} end")

        cls.send = timed_send
    elif name == "prefect.flow_engine":
        for fname in ("run_flow_async",):
            setattr(module, fname, _timed(getattr(module, fname), f"harvest: {fname}"))
        cls = module.AsyncFlowRunEngine
        for meth in ("begin_run", "create_flow_run", "call_flow_fn", "handle_success"):
            if hasattr(cls, meth):
                setattr(cls, meth, _timed(getattr(cls, meth), f"harvest: engine.{meth}"))
    elif name in ("harvest.flows.commands.run_job", "harvest.flows.commands.run_report"):
        for fname in {
            "harvest.flows.commands.run_job": ("run_job",),
            "harvest.flows.commands.run_report": ("report",),
        }[name]:
            fn = getattr(module, fname)

            def wrapped_fn(*a: Any, _f: Any = fn, _n: str = fname, **k: Any) -> Any:
                mark(f"harvest: {_n} begin")
                try:
                    return _f(*a, **k)
                finally:
                    mark(f"harvest: {_n} end")

            setattr(module, fname, wrapped_fn)
    elif name == "uvicorn.lifespan.on":
        startup = module.LifespanOn.startup

        async def patched(self: Any) -> None:
            mark("server: lifespan startup begin")
            await startup(self)
            mark("server: lifespan startup end")

        module.LifespanOn.startup = patched


def _timed_exec(loader: Any, name: str) -> None:
    """Wrap the loader's exec_module on this instance (the loader itself stays: resources still work)."""
    inner = loader.exec_module

    def exec_module(module: Any) -> None:
        mark(f"import {name} begin")
        inner(module)
        mark(f"import {name} end")
        _patch(module)

    loader.exec_module = exec_module


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            _timed_exec(spec.loader, name)
        return spec


def _wrap_atexit() -> None:
    register = atexit.register

    def timed_register(fn: Any, *a: Any, **k: Any) -> Any:
        label = getattr(fn, "__qualname__", None) or repr(fn)[:80]
        register(_timed(fn, f"atexit {getattr(fn, '__module__', '')}.{label}"), *a, **k)
        return fn

    atexit.register = timed_register
    thread_register = threading._register_atexit  # type: ignore[attr-defined]

    def timed_thread_register(fn: Any, *a: Any, **k: Any) -> None:
        label = getattr(fn, "__qualname__", repr(fn))
        thread_register(_timed(fn, f"threading-atexit {label}"), *a, **k)

    threading._register_atexit = timed_thread_register  # type: ignore[attr-defined]


if _FILE:
    mark(f"interpreter up: {' '.join(sys.argv)[:80]}")
    sys.meta_path.insert(0, _Finder())
    _wrap_atexit()

    def _last() -> None:
        mark("atexit: last handler (registered first)")
        if os.environ.get("HARVEST_TIMELINE_FAST_EXIT") and "uvicorn" not in sys.modules:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    atexit.register(_last)
