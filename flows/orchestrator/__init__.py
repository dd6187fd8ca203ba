"""Prefect: its settings, the temporary server, flow run states, deployments."""
