"""Charts and the HTML report, drawn from results directories only (never from a live run)."""
