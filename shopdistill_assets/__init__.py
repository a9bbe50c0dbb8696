"""shopdistill: SN15 trajectory firehose -> training corpus -> distilled shopping agent, as Dagster assets."""

__version__ = "0.1.0"
