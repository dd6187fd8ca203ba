"""Job specs shipped with harvest: the demo job (18 endpoints, every platform) and realistic examples.

A package, so that `pip install .` (not only an editable install) carries them: `harvest demo` reads its spec
from here wherever harvest is installed.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def spec_path(name: str) -> Path:
    """The path of a shipped spec, e.g. `spec_path("demo.yaml")` or `spec_path("examples/brand-watch.yaml")`."""
    return Path(str(files(__package__).joinpath(name)))
