"""From an answer's bytes to typed records, and an account of what did not make it."""
