"""Which Iceberg catalog an export commits to, and how its files reach the warehouse.

pyiceberg's own configuration decides first: a catalog named `harvest` (or `HARVEST_ICEBERG_CATALOG`) in
`~/.pyiceberg.yaml` or in `PYICEBERG_CATALOG__HARVEST__*` variables (`__URI`, `__TYPE`, `__CREDENTIAL`,
`__WAREHOUSE`, ...) is loaded as pyiceberg loads it: a REST catalog (Polaris, Nessie, Unity, Glue's), or any
other pyiceberg knows. `--to` is then its warehouse unless that configuration names one. Without one,
harvest keeps a SQL catalog on SQLite, so an export needs no service running (dlt #3324):

- a local destination holds its catalog: `<destination>/iceberg_catalog.db` beside the tables, one
  self-contained directory;
- an object-store destination (`s3://`, `gs://`) cannot hold SQLite, so its catalog stays with the job:
  `<output>/iceberg/<destination as a file name>.db`, one per destination.

Tables live at `<warehouse>/<namespace>/<table>/` (`metadata/`, `data/`); the namespace is `harvest`, or
`HARVEST_ICEBERG_NAMESPACE`. Object-store credentials are the standard AWS variables, handed to pyiceberg's
FileIO as its own properties (pyiceberg does not read `AWS_ENDPOINT_URL`, and would ask AWS for a bucket's
region without `s3.region`). No property value is ever put into a message: a catalog's credential or a
secret key would travel with it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.utils.config import Config

from harvest.tasks.output.layout import OutputLayout

CATALOG_ENV = "HARVEST_ICEBERG_CATALOG"
NAMESPACE_ENV = "HARVEST_ICEBERG_NAMESPACE"
DEFAULT_NAME = "harvest"
SQLITE_FILE = "iceberg_catalog.db"
S3_PROPERTIES = {
    "AWS_ACCESS_KEY_ID": "s3.access-key-id",
    "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
    "AWS_SESSION_TOKEN": "s3.session-token",
}
"""AWS variable -> pyiceberg FileIO property (endpoint and region have fallbacks, below)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def catalog_name() -> str:
    return os.environ.get(CATALOG_ENV) or DEFAULT_NAME


def namespace() -> str:
    return os.environ.get(NAMESPACE_ENV) or DEFAULT_NAME


def is_local(destination: str) -> bool:
    return "://" not in destination or destination.startswith("file://")


def warehouse_uri(destination: str) -> str:
    """A URI pyiceberg's FileIO resolves: a local directory as `file://`, an object store's URL as it is."""
    if destination.startswith("file://"):
        return destination
    if "://" not in destination:
        return Path(destination).resolve().as_uri()
    return destination.rstrip("/")


def file_io_properties(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The AWS variables as pyiceberg FileIO properties; only those set (the rest is pyarrow's chain)."""
    props = {prop: env[var] for var, prop in S3_PROPERTIES.items() if env.get(var)}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if endpoint:
        props["s3.endpoint"] = endpoint
    if region:
        props["s3.region"] = region
    return props


def sqlite_path(destination: str, layout: OutputLayout) -> Path:
    """Where the default catalog lives (see the module's docstring)."""
    if is_local(destination):
        local = destination.removeprefix("file://")
        return Path(local) / SQLITE_FILE
    slug = _UNSAFE.sub("_", destination.split("://", 1)[1]).strip("._") or "warehouse"
    return layout.root / "iceberg" / f"{destination.split('://', 1)[0]}_{slug}.db"


def configured(name: str) -> dict[str, str]:
    """pyiceberg's configuration of catalog `name`, read now (its module-level copy is from import time)."""
    found = Config().get_catalog_config(name)
    return {str(k): str(v) for k, v in (found or {}).items()}


def open_catalog(destination: str, layout: OutputLayout) -> Catalog:
    """The configured catalog if pyiceberg has one by harvest's name, else the SQLite one."""
    name = catalog_name()
    props = file_io_properties()
    config = configured(name)
    if config:
        merged = {**props, **config}
        merged.setdefault("warehouse", warehouse_uri(destination))
        return load_catalog(name, **merged)
    path = sqlite_path(destination, layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab"):  # SQLite says only "unable to open database file"; this names the path and why
        pass
    return SqlCatalog(name, uri=f"sqlite:///{path}", warehouse=warehouse_uri(destination), **props)


def warehouse_named(name: str) -> bool:
    """Whether pyiceberg's configuration of catalog `name` names its own warehouse (`--to` is then not where
    its tables are: the configuration, or a REST catalog's server, decides)."""
    return "warehouse" in configured(name)


def elsewhere(catalog: Catalog, space: str, destination: str) -> str | None:
    """A table of the catalog's namespace that lives outside `destination`, said with its location (for a
    catalog whose warehouse is `--to`: the SQLite one harvest keeps, or a configured one that names none):
    merged into, the rows would land there while the export said `--to`. None when every table is under it."""
    if warehouse_named(catalog.name):
        return None
    root = warehouse_uri(destination).rstrip("/") + "/"
    for identifier in catalog.list_tables(space):
        location = catalog.load_table(identifier).location().split("?", 1)[0]
        if not (location.rstrip("/") + "/").startswith(root):
            return f"{'.'.join(identifier)} in {describe(catalog)} lives at {location}"
    return None


def describe(catalog: Catalog) -> str:
    """The catalog for a message: its kind and, for SQLite, the file; never a URI (it may hold a credential)."""
    if isinstance(catalog, SqlCatalog):
        return f"SQL catalog {catalog.name!r} ({catalog.engine.url.database})"
    return f"{type(catalog).__name__} {catalog.name!r}"
