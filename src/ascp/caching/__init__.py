"""What every cache of ascp is built from: `lru` (the one bounded in-memory cache) and `files`
(`$ASCP_HOME`, where a file derived from a model file is kept, and the one file identity a cache
is keyed by)."""
