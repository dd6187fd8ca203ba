"""The credit ledger: the one place that decides whether a request may be sent."""

MAX_CREDITS = 10**15
"""The most a budget, a floor or a cap may say (the spec, `--budget`): far above any account, and within the
64-bit integers the manifest, the journal and DuckDB count in (a larger one was taken, then crashed the run)."""
