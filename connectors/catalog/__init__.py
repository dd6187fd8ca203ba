"""The service as harvest knows it: every endpoint, its parameters, where its records and cursors are."""
