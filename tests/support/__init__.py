"""Drivers and probes the tests attach to a running engine through its public step listeners."""
