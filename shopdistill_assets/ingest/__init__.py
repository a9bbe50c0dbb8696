"""Ingest: a subnet day from S3, a folder or ORO's API (`oro_assets.py`), as raw firehose files."""
