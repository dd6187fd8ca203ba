"""The `harvest` command line.

Commands that run no flow (validate, plan, endpoints, schema, runs) must not import Prefect, so that they answer
in about a second: Prefect and the flow are imported inside the commands that need them.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="harvest",
    help="Collect data from the retrieval service into Parquet and DuckDB, under a hard credit budget.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command(
    epilog="Example: harvest sandbox --port 8765 --api-key demo-key --credits 1000 --fault-rate 0.1 --seed 7"
)
def sandbox(
    port: int = typer.Option(8765, help="Port on 127.0.0.1 to serve on."),
    api_key: str = typer.Option("sandbox-key", help="The API key the sandbox accepts."),
    credits: int = typer.Option(1000, help="Starting credit balance of that key."),
    fault_rate: float = typer.Option(0.0, help="Share of requests answered with an injected fault (0..1)."),
    seed: int = typer.Option(0, help="Seed of the fault schedule and of the synthetic data."),
) -> None:
    """Serve the local emulation of the service on 127.0.0.1 until interrupted."""
    from sandbox.server import serve

    serve(port=port, api_key=api_key, credits=credits, fault_rate=fault_rate, seed=seed)


if __name__ == "__main__":
    app()
