"""Session-wide test setup.

Prefect must never phone home from tests, and every test session gets its own throw-away Prefect home.
These variables are set before anything imports Prefect.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="harvest-prefect-"))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"

pytest_plugins = ["tests.fixtures_sandbox"]
