"""`tether keys generate` and `tether keys rotate`: encryption at rest."""

from __future__ import annotations

import argparse
from typing import Any

from tether.cli.common import console
from tether.control.wiring import open_blobs
from tether.store import Store

ORDER = 160


def add_parser(sub: Any) -> None:
    """`tether keys generate` and `tether keys rotate`."""
    keys = sub.add_parser("keys", help="encryption at rest: key rings ($TETHER_KEYS)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser(
        "generate", help="print a new key ring, or $TETHER_KEYS plus a new current key"
    )
    generate.add_argument("--id", help="the new key's id (default: k1, k2, ...)")
    generate.set_defaults(fn=cmd_keys_generate, opens_store=False)
    rotate = keys_sub.add_parser(
        "rotate",
        help="wrap run keys again under the current key, and re-seal stored blobs with "
        "--reseal-blobs (logs are never rewritten)",
    )
    rotate.add_argument(
        "--reseal-blobs", dest="blobs_too", action="store_true", help="re-seal every blob now"
    )
    rotate.set_defaults(fn=cmd_keys_rotate)


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from tether.foundation.crypto.keyring import KeyRing

    ring = args.keys
    if ring is None:
        ring = KeyRing.new(args.id or "k1")
    else:
        ring = ring.with_new_key(args.id or f"k{len(ring.keys) + 1}")
    print(ring.dump())
    return 0


async def cmd_keys_rotate(store: Store, args: argparse.Namespace) -> int:
    from tether.blobs.sealed import SealedBlobStore
    from tether.foundation.errors import KeyRingError

    if args.keys is None:
        raise KeyRingError("tether keys rotate: no key ring configured (TETHER_KEYS)")
    from tether.foundation.crypto.runkeys import rewrap_all

    rewrapped, _, unopened = await rewrap_all(args.keys, store.keys)
    resealed = kept = 0
    async with open_blobs(args.settings) as blobs:
        assert isinstance(blobs, SealedBlobStore)
        if args.blobs_too:
            async for info in blobs.list():
                if await blobs.reseal(info.sha256):
                    resealed += 1
                else:
                    kept += 1
    console.print(
        f"current key {args.keys.current!r}: "
        + (
            f"resealed {resealed} blobs, {kept} were current already"
            if args.blobs_too
            else "new data is sealed under it; old keys still open old data "
            "(--reseal-blobs re-seals blobs)"
        )
        + (f"; wrapped {rewrapped} run keys again under it" if rewrapped else "")
        + (
            f"; {len(unopened)} run keys this ring cannot open were left as they are "
            f"(e.g. run {unopened[0]})"
            if unopened
            else ""
        )
    )
    return 0
