"""Refs that point outside the store are refused and never fetched."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from tether.blobs import BlobRef, BlobRefRefused, BlobStore

from .conftest import Backend

SHA = hashlib.sha256(b"secret").hexdigest()

# Each builds a hostile url from the store's root url (e.g. file:///tmp/x/blobs or
# s3://bucket/blobs); the last path segment is a valid sha256 unless the case is about keys.
HOSTILE: dict[str, Callable[[str], str]] = {
    "other bucket or dir": lambda root: root.replace("/blobs", "/elsewhere") + f"/53/ba/{SHA}",
    "other prefix": lambda root: f"{root}/nested/53/ba/{SHA}",
    "sibling sharing a name prefix": lambda root: f"{root}-evil/53/ba/{SHA}",
    "other bucket": lambda root: f"s3://other-bucket/blobs/53/ba/{SHA}",
    "etc passwd": lambda root: "file:///etc/passwd",
    "http to loopback": lambda root: f"http://127.0.0.1/53/ba/{SHA}",
    "https with root path": lambda root: "https://127.0.0.1:9000" + root.split(":", 1)[1][2:],
    "dotdot traversal": lambda root: f"{root}/53/ba/../../../../../etc/{SHA}",
    "dotdot out of root": lambda root: f"{root}/../53/ba/{SHA}",
    "percent encoded dotdot": lambda root: f"{root}/53/%2e%2e/ba/{SHA}",
    "wrong fanout": lambda root: f"{root}/00/00/{SHA}",
    "no fanout": lambda root: f"{root}/{SHA}",
    "uppercase hex": lambda root: f"{root}/53/BA/{SHA.upper()}",
    "non hex key": lambda root: f"{root}/gg/gg/{'g' * 64}",
    "short key": lambda root: f"{root}/53/ba/{SHA[:-1]}",
    "named file": lambda root: f"{root}/53/ba/passwd",
    "query string": lambda root: f"{root}/53/ba/{SHA}?versionId=1",
    "fragment": lambda root: f"{root}/53/ba/{SHA}#x",
    "trailing slash": lambda root: f"{root}/53/ba/{SHA}/",
    "empty": lambda root: "",
}


@pytest.fixture
def fetches(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Records every backend read, existence check and file open made during the test."""
    seen: list[str] = []
    store: Any = backend.store
    original_read = store._read_chunks
    original_size = store._stored_size

    def read_chunks(sha256: str) -> AsyncIterator[bytes]:
        seen.append(f"read {sha256}")
        return original_read(sha256)  # type: ignore[no-any-return]

    async def stored_size(sha256: str) -> int | None:
        seen.append(f"head {sha256}")
        return await original_size(sha256)  # type: ignore[no-any-return]

    monkeypatch.setattr(store, "_read_chunks", read_chunks)
    monkeypatch.setattr(store, "_stored_size", stored_size)

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and recording and "passwd" in str(args[0]):
            seen.append(f"open {args[0]}")

    # Audit hooks cannot be removed, so this one is switched off after the test.
    recording = True
    sys.addaudithook(audit)
    yield seen
    recording = False


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_url_is_refused_and_never_fetched(
    backend: Backend, fetches: list[str], case: str
) -> None:
    # The blob exists in this store, so a fetch would succeed if the check let it through.
    stored = await backend.store.put(b"secret")
    assert stored.sha256 == SHA
    fetches.clear()

    url = HOSTILE[case](backend.store.root_url)
    assert url != stored.url
    ref = BlobRef(url, 6, SHA, "text/plain")
    with pytest.raises(BlobRefRefused, match="refused") as info:
        await backend.store.get(ref)
    assert repr(url) in str(info.value)
    assert backend.store.root_url in str(info.value)
    with pytest.raises(BlobRefRefused):
        backend.store.open(ref)
    with pytest.raises(BlobRefRefused):
        await backend.store.exists(ref)
    with pytest.raises(BlobRefRefused):
        backend.store.resolve(url)
    assert fetches == []


async def test_ref_whose_hash_differs_from_its_url_is_refused(
    backend: Backend, fetches: list[str]
) -> None:
    stored = await backend.store.put(b"secret")
    fetches.clear()
    other = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(BlobRefRefused, match="sha256 field"):
        await backend.store.get(BlobRef(stored.url, 6, other, "text/plain"))
    assert fetches == []


@pytest.mark.parametrize("key", ["../../etc/passwd", SHA.upper(), SHA[:10], f"{SHA}/", "", "ab"])
async def test_hostile_keys_are_refused(backend: Backend, fetches: list[str], key: str) -> None:
    store: BlobStore = backend.store
    with pytest.raises(BlobRefRefused, match="lowercase 64-hex"):
        await store.exists(key)
    with pytest.raises(BlobRefRefused, match="lowercase 64-hex"):
        await store.delete(key)
    with pytest.raises(BlobRefRefused):
        store.url_for(key)
    assert fetches == []


async def test_own_url_resolves(backend: Backend, fetches: list[str]) -> None:
    ref = await backend.store.put(b"secret")
    fetches.clear()
    assert backend.store.resolve(ref.url) == SHA
    assert await backend.store.get(ref) == b"secret"
    assert fetches == [f"read {SHA}"]
