"""What the broker and its workers agree on: limits, strict fields, job types; imports neither."""
