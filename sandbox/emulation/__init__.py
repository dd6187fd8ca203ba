"""What the emulated service answers: the endpoint table, page builders, synthetic records."""
