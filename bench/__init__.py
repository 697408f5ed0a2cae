"""Switchyard benchmarks: throughput, wake-up latency, provider overhead, backlog and idle cost."""
