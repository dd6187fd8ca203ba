"""What a run would cost before it runs: the plan's expected case and its worst case against the budget."""
