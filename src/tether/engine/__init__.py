"""Layers 4 and 5, the engine: the record writer and bus (4); the runtime, its executor,
node contexts, registries, journaled steps, deliveries and in-process leases (5)."""
