"""`tether serve` and per-run keys: a run's blobs are served under its own key, and a blob
of a crypto-shredded run that a fork still points to is refused as such (410)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.ops.test_shredding import MARKER, shreddable
from tests.server.kit import TOKEN, start_server
from tether import Runtime
from tether.blobs import LocalBlobStore
from tether.foundation.crypto import KeyRing
from tether.model.records import blob_refs, decode_log
from tether.ops import delete_run
from tether.store.sqlite import SqliteStore

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_blobs_of_runs_with_their_own_key_are_served_until_shredded(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tether.db"
    ring = KeyRing.new()
    async with SqliteStore(db) as store, LocalBlobStore(tmp_path / "blobs") as blobs:
        rt = Runtime(store, blobs=blobs, keys=ring)
        await rt.start(shreddable, {"q": "1"}, run_id="alive")
        await rt.start(shreddable, {"q": "2"}, run_id="src")
        fork = await rt.fork("src", at_seq=1)  # points to src's attachment
        await delete_run(store, "src", blobs=rt.blobs, shred=True)
        shas = {}
        for run_id in ("alive", fork):
            records = decode_log(run_id, await store.log.read_all(run_id))
            shas[run_id] = next(
                ref.sha256
                for r in records
                for _, ref in blob_refs(r)
                if ref.media_type == "text/plain"
            )
    server = start_server(tmp_path, f"sqlite:///{db}", env={"TETHER_KEYS": ring.dump()})
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            alive = await http.get(f"/v1/blobs/{shas['alive']}", params={"run_id": "alive"})
            gone = await http.get(f"/v1/blobs/{shas[fork]}", params={"run_id": fork})
    finally:
        assert server.stop() == 0
    assert alive.status_code == 200 and alive.text == MARKER * 10
    assert gone.status_code == 410, gone.text
    assert gone.json()["error"]["type"] == "blob_shredded"
