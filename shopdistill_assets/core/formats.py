"""Names of the firehose record formats that more than one part writes or reads."""

# The primary record: one validator run of one problem (what ORO's ingest writes and the corpus
# reads first; contracts/sn15-firehose.md).
PRIMARY = "sn15.problem_run/v1"
