"""One module per group of `harvest` commands: what each prints and its exit code."""
