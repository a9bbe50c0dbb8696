"""The corpus: firehose lines -> normalized traces -> structural filter -> gates -> the day's five
tables and the rejection ledger. `assets.py` is the Dagster side; the rest is plain Python."""
