"""Rows to an Iceberg table's data files, batch by batch: memory is one batch, whatever the merge's size.

pyiceberg's own writers bin-pack a stream into file-sized groups and hand them to a thread pool whose `map`
takes every group at once, so a streamed append still holds the whole stream in memory (0.12). This writer
keeps one Parquet file open and writes each batch as it comes (a row group each), rolling to the next file
past `ROLL_BYTES` of Arrow data; the files carry the field ids and column statistics pyiceberg writes (its
own Parquet writer and statistics), so the table's readers and its scan planning see the files pyiceberg
would have written. Files written for a merge that then fails to commit are orphans no snapshot names
(Iceberg's `remove_orphan_files` maintenance removes them); a table never sees them.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.io.fileformat import FileFormatFactory, FileFormatWriter
from pyiceberg.io.pyarrow import (
    ArrowScan,
    _read_all_delete_files,
    _to_requested_schema,
    pyarrow_to_schema,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema, prune_columns, sanitize_column_names
from pyiceberg.table import FileScanTask
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import ListType, MapType

ROLL_BYTES = 256 * 1024 * 1024
"""Arrow bytes per data file (~30-80 MB of Parquet): files small enough that a merge replacing a few rows
rewrites little, large enough that readers do not open thousands."""
READ_ROWS = 65_536
"""Rows per batch read back from a data file (a row group at a time)."""


def read_batches(
    metadata: TableMetadata, io: FileIO, task: FileScanTask, schema: Schema
) -> Iterator[pa.RecordBatch]:
    """One data file's rows in `schema` (older files lack newer columns: null), a row group at a time.

    pyiceberg's scan reads sixteen batches ahead with whole row groups pre-buffered: rewriting one 1M-row file
    took 740 MB. A file another engine gave delete files is read through pyiceberg's scan (it applies them)."""
    if task.delete_files:
        scan = ArrowScan(metadata, io, schema, AlwaysTrue())
        yield from scan._record_batches_from_scan_tasks_and_deletes(
            [task], _read_all_delete_files(io, [task])
        )
        return
    with io.new_input(task.file.file_path).open() as stream:
        parquet = pq.ParquetFile(stream)
        file_schema = pyarrow_to_schema(
            parquet.schema_arrow, metadata.schema().name_mapping, format_version=metadata.format_version
        )
        ids = {i for i in schema.field_ids if not isinstance(schema.find_type(i), (ListType, MapType))}
        present = prune_columns(file_schema, ids, select_full_types=False)
        names = [column.name for column in present.columns]
        for batch in parquet.iter_batches(batch_size=READ_ROWS, columns=names):
            yield _to_requested_schema(schema, present, batch, allow_timestamp_tz_mismatch=True)


class DataFileWriter:
    """Writes batches in `metadata`'s current schema (columns the batch lacks are null) to new data files."""

    def __init__(self, metadata: TableMetadata, io: FileIO, roll_bytes: int = ROLL_BYTES) -> None:
        self._metadata = metadata
        self._io = io
        self._roll_bytes = roll_bytes
        schema = metadata.schema()
        self._file_schema: Schema = sanitize_column_names(schema)
        self._arrow_schema = schema_to_pyarrow(self._file_schema, include_field_ids=True)
        """What every batch is cast to: incoming rows and a rewritten file's rows differ in string widths."""
        self._name_mapping = schema.name_mapping
        self._model = FileFormatFactory.get(FileFormat.PARQUET)
        self._locations = load_location_provider(metadata.location, metadata.properties)
        self._write_uuid = uuid.uuid4()
        self._counter = itertools.count()
        self._open: tuple[FileFormatWriter, OutputFile, str] | None = None
        self._bytes = 0
        self.files: list[DataFile] = []
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._open is None:
            self._open = self._start()
        task_schema = pyarrow_to_schema(
            batch.schema, name_mapping=self._name_mapping, format_version=self._metadata.format_version
        )
        shaped = _to_requested_schema(
            requested_schema=self._file_schema,
            file_schema=task_schema,
            batch=batch,
            include_field_ids=True,
            format_model=self._model,
        )
        self._open[0].write(pa.Table.from_batches([shaped.cast(self._arrow_schema)]))
        self._bytes += batch.nbytes
        self.rows += batch.num_rows
        if self._bytes >= self._roll_bytes:
            self._finish()

    def close(self) -> list[DataFile]:
        """The data files written, each closed and described (statistics for scan planning)."""
        if self._open is not None:
            self._finish()
        return self.files

    def _start(self) -> tuple[FileFormatWriter, OutputFile, str]:
        name = f"00000-{next(self._counter)}-{self._write_uuid}.{self._model.file_extension()}"
        path = self._locations.new_data_location(data_file_name=name)
        output = self._io.new_output(path)
        writer = self._model.create_writer(output, self._file_schema, self._metadata.properties)
        return writer, output, path

    def _finish(self) -> None:
        assert self._open is not None
        writer, output, path = self._open
        self._open, self._bytes = None, 0
        statistics = writer.close()
        self.files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=Record(),
                file_size_in_bytes=len(output),
                sort_order_id=None,
                spec_id=self._metadata.default_spec_id,
                equality_ids=None,
                key_metadata=None,
                **statistics.to_serialized_dict(),
            )
        )
