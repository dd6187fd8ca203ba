"""The emulated service on the wire: the ASGI app, faults, billing, validation, serving."""
