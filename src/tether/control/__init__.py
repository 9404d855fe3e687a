"""Layer 7, control: who executes a run (resume, requeue, cancel), workers and their
routing, deploys, settings and the wiring of every entry point."""
