"""shopdistill: SN15 trajectory firehose -> training corpus -> distilled shopping agent, as Dagster assets."""

import os

# Arrow's allocator (mimalloc) gives freed memory back to the OS 10 ms after a free; the corpus
# path frees and reallocates tens of MB per batch, so each batch faulted in fresh zeroed (huge)
# pages again: ~15% of its time. Kept for reuse instead (the peak stays the high-water mark).
# mimalloc reads this when pyarrow loads, hence here; a value set in the environment wins.
# resources/__init__.py sets the same (either package may be imported first).
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")

__version__ = "0.1.0"
