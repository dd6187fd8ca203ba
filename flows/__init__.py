"""The command line, the `collect_job` flow and what they print.

The first harvest code the `harvest` process runs: SIGTERM and SIGHUP are taken over here, before anything else
is imported, so that they act as Ctrl-C from the start (`flows.stop_signals`); then stdout and stderr are
wrapped, so that a closed one stops a run as SIGTERM does instead of failing what wrote to it
(`flows.closed_output`).
"""

from harvest.flows import stop_signals

stop_signals.at_start()
stop_signals.served_listens()

if stop_signals.in_the_cli():
    from harvest.flows import closed_output

    closed_output.at_start()
