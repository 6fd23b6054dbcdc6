"""Keyed count: a RocksDB store over a Delta input, running counts written to a Delta stream."""
