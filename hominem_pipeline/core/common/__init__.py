"""Small helpers every package uses: progress, statistics, the data schema, SQL, tags."""
