"""`harvest export --format iceberg|delta`: landed runs merged into open table formats on the primary key."""
