"""`vtwin connector-check`'s library: any KV connector's scheduler side run through upstream's
scheduler against the connector contract (`check`)."""
