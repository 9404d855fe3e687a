"""Layer 1, the foundation: errors, statuses, core types and small utilities that import no
other layer."""
