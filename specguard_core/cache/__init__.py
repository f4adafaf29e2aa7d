"""Model handles and their KV caches: the shared cache types and the `Target` protocol (`state`),
the in-process model handle, the one place caches are extended, forked, rolled back and caught up
(`handle`), a cache's rows lent to a padded forward (`batching`), and attention capture
(`capture`)."""
