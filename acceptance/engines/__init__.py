"""Transports (engines) and the memory they move."""
