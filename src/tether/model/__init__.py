"""Layer 3, the run model: records, the graph rebuilt from them, values, budgets, waits,
and the views of a run read from its log."""
