"""Fixtures that serve the sandbox over real HTTP on 127.0.0.1 (filled in by the sandbox work)."""
