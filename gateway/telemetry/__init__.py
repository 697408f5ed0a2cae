"""What a running gateway tells its operator: the event log, process logging, and the masking of secrets in both."""
