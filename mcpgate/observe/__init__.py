"""What an operator sees of the gateway: traces, the audit log, JSON logs, the refusals /metrics counts."""
