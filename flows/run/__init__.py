"""The steps of one `collect_job` run, in the order they happen."""
