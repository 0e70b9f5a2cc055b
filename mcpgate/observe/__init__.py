"""What an operator sees of the gateway beyond /metrics: the audit log and JSON logs."""
