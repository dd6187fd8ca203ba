"""The command line, the `collect_job` flow and what they print.

The first harvest code the `harvest` process runs: SIGTERM and SIGHUP are taken over here, before anything else
is imported, so that they act as Ctrl-C from the start (`flows.stop_signals`).
"""

from flows import stop_signals

stop_signals.at_start()
