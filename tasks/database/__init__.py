"""Everything DuckDB: the connection, the merge of record tables, the bookkeeping tables."""
