"""Queries on a Dask cluster: rounds of grants from the flow's one ledger."""
