"""A faithful local emulation of the credit-billed retrieval service, for `make demo`, tests and benchmarks.

Start one with `sandbox.wire.serving.running(...)` (background thread) or `sandbox.wire.serving.serve(...)` (foreground);
ask what a full crawl holds with `sandbox.expected.full_crawl(...)`.
"""

from harvest.sandbox.config import FaultKind, Quirks, SandboxConfig

__all__ = ["FaultKind", "Quirks", "SandboxConfig"]
