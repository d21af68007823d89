"""What a run checks: profiles (schema, built-ins), the catalog (every metric once) and the one judge."""
