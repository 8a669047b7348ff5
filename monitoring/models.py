"""Monitoring keeps its series in Redis; no database models yet."""
