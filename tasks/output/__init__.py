"""Every file a run writes: layout, raw store, journal, attempt logs, Parquet, manifest, lock."""
