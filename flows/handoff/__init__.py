"""What an output directory hands to others: rebuild, export, the raw pages."""
