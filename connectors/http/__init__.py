"""Talking to the service: one request on one connection, retries, the pace, the key."""
