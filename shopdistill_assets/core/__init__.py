"""The shared vocabulary every part uses: problem identity and canonical text, days, recency, tokens."""
