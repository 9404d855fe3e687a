"""What the HTTP API shows of a run, record or row: no host paths, no host:pid.

`tether show --json` prints the views of `tether.model.run_view` as they are, for the operator
on the host. Over HTTP the same views go to callers who need not know where the blob
store lives nor which host and pid execute a run, so before a view leaves the server a
blob's `file://` or `s3://` url becomes its `/v1/blobs/...` route and an owner becomes an
opaque id (an HMAC of it, stable across requests and replicas that share the token).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import quote


def blob_url(sha256: str, run_id: str) -> str:
    return f"/v1/blobs/{sha256}?run_id={quote(run_id, safe='')}"


class Publisher:
    """Rewrites views in place for callers of the API."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def owner_id(self, owner: str | None) -> str | None:
        if not owner:
            return owner
        digest = hmac.new(self._key, owner.encode(), hashlib.sha256).hexdigest()
        return "owner-" + digest[:16]

    def view(self, view: dict[str, Any], run_id: str) -> dict[str, Any]:
        """A record, run or row view (its own `owner` field included), rewritten."""
        if isinstance(view.get("owner"), str):
            view["owner"] = self.owner_id(view["owner"])
        for blob in view.get("blobs") or ():
            if isinstance(blob, dict):
                self._blob(blob, run_id)
        # Inline values anywhere below (input, output, result): {"$blob": {...}}. Walked
        # with a stack: a handler's output may nest deeper than the recursion limit.
        stack: list[Any] = [view]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                for key, item in value.items():
                    if key == "$blob" and isinstance(item, dict):
                        self._blob(item, run_id)
                    elif isinstance(item, dict | list):
                        stack.append(item)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, dict | list))
        return view

    @staticmethod
    def _blob(blob: dict[str, Any], run_id: str) -> None:
        sha = blob.get("sha256")
        if isinstance(sha, str):
            blob["url"] = blob_url(sha, run_id)
