"""Plain-Python corpus core: dialects, normalization, structural filter, gates, reasons (no Dagster)."""
