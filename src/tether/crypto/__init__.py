"""Encryption at rest (the `encryption` extra): a key ring and AES-256-GCM sealing."""

from tether.crypto.keyring import KeyRing, generate_key, load_ring
from tether.crypto.seal import open_sealed, seal

__all__ = ["KeyRing", "generate_key", "load_ring", "open_sealed", "seal"]
