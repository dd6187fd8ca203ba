"""The credit ledger: the one place that decides whether a request may be sent."""
