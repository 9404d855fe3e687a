"""The demo agent: a scripted, deterministic model that needs no network."""
