"""Facts about this node: sysfs, nodefacts, NICs and rails, port counters, preflight facts, overrides."""
