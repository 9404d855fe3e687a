"""Encryption at rest (the `encryption` extra): a key ring and AES-256-GCM sealing."""

from tether.foundation.crypto.keyring import KeyRing, generate_key, load_ring
from tether.foundation.crypto.seal import open_sealed, seal

__all__ = ["KeyRing", "generate_key", "load_ring", "open_sealed", "seal"]
