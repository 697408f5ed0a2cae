"""The processing and delivery machinery every backend runs: the intake into the spool, the worker loop, the
scheduler of ordering keys, the outcome of a handled message, the delivery loop of replies, channel supervision,
receipts, the outbox, process containment, settings reloads. What a backend's runtime is, and what the Gateway
hands it, is gateway/stores.py."""
