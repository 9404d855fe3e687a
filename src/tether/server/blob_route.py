"""GET /v1/blobs/{sha256}?run_id=: a blob some record of that run points to, streamed.

A blob is whatever a node wrote (a fetched web page, an SVG), so it is served as a
download, never as a document of this origin: `Content-Disposition: attachment` (inline
only for raster images the console may preview), `nosniff`, and a sandboxing CSP in case
a browser renders it anyway. Errors name the blob by its route, never by a host path.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tether.blobs import BlobRef
from tether.blobs.base import is_sha256_hex
from tether.blobs.errors import BlobError, BlobRefRefused
from tether.blobs.sealed import SealedBlobStore
from tether.foundation.crypto.runkeys import DataShredded, RunKeyBox
from tether.foundation.errors import UnknownRun
from tether.model.records import blob_refs, decode_log
from tether.server.schemas import BadRequest
from tether.server.views import blob_url
from tether.store.keys import fetcher

if TYPE_CHECKING:
    from tether.blobs import BlobStore
    from tether.server.state import ServerState

log = logging.getLogger("tether.server")
# Never SVG (it runs script) nor HTML: only these may render in place.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
BLOB_CSP = "sandbox; default-src 'none'"


async def get_blob(request: Request) -> Response:
    server: ServerState = request.app.state.tether
    sha256 = request.path_params["sha256"]
    # The API names the run in the query; the page's own route, in its path.
    run_id = request.path_params.get("run_id") or request.query_params.get("run_id")
    if not is_sha256_hex(sha256):
        raise BadRequest(400, "bad_sha256", "the blob key must be a lowercase 64-hex sha256")
    if not run_id:
        raise BadRequest(
            400, "run_id_required", "name the run whose record points to the blob: ?run_id="
        )
    if server.blobs is None:
        raise BadRequest(404, "no_blob_store", "this server has no blob store")
    if await server.store.runs.get(run_id) is None:
        raise UnknownRun(run_id)
    # Only bytes a record of the run points to are served: a caller cannot read any
    # blob of the store by guessing hashes, only what its runs reference.
    ref = None
    for record in decode_log(run_id, await server.store.log.read_all(run_id)):
        for _, pb in blob_refs(record):
            if pb.sha256 == sha256:
                ref = BlobRef(pb.url, pb.size, pb.sha256, pb.media_type)
                break
        if ref is not None:
            break
    if ref is None:
        raise BadRequest(404, "unknown_blob", f"no record of run {run_id} points to {sha256}")
    where = blob_url(sha256, run_id)
    try:
        ref = await _stored(server.blobs, ref)
    except BlobError as exc:
        # The message names the store's paths: the log gets it, the caller the route.
        log.warning("blob %s of run %s: %s", sha256, run_id, exc)
        raise BadRequest(503, "blob_unavailable", f"blob {where} cannot be read now") from None
    if ref is None:
        raise BadRequest(404, "blob_missing", f"blob {where} is referenced but not stored")
    body: AsyncIterator[bytes] = server.blobs.open(ref)
    if isinstance(server.blobs, SealedBlobStore):
        # Opened whole (a sealed blob is), under the run keys this request fetches: a key
        # shredded since is never held over from an earlier request.
        box = RunKeyBox(server.blobs.ring, fetcher(server.store.keys))
        try:
            plain = await server.blobs.for_run(box).get(ref)
        except DataShredded:
            raise BadRequest(
                410, "blob_shredded", f"blob {where} belongs to a crypto-shredded run"
            ) from None
        body = _whole(plain)
    media_type = safe_media_type(ref.media_type)
    inline = media_type.split(";")[0] in INLINE_TYPES
    disposition = "inline" if inline else "attachment"
    return StreamingResponse(
        body,
        media_type=media_type,
        headers={
            "Content-Length": str(ref.size),
            "ETag": f'"{sha256}"',
            "Content-Disposition": f'{disposition}; filename="{sha256[:16]}"',
            "Content-Security-Policy": BLOB_CSP,
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, no-store",
        },
    )


_TOKEN = re.compile(r"[A-Za-z0-9!#$&^_.+-]+")
# Parameters a blob's type keeps, each with a token value; every other one is dropped.
SAFE_PARAMETERS = frozenset({"charset"})


def safe_media_type(recorded: str) -> str:
    """The type a blob is served with: the recorded type/subtype (lowercase) and its
    known-safe parameters (`charset`), or application/octet-stream if the type does not
    parse. A parameter may hold anything a node wrote (a quoted CR LF that h11 refuses
    to send as a header, which left the blob undownloadable), so none is copied as is."""
    kind, *params = recorded.split(";")
    main, slash, sub = kind.strip().lower().partition("/")
    if not (slash and _TOKEN.fullmatch(main) and _TOKEN.fullmatch(sub)):
        return "application/octet-stream"
    kept, seen = [f"{main}/{sub}"], set()
    for param in params:
        name, eq, value = param.partition("=")
        name, value = name.strip().lower(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if eq and name in SAFE_PARAMETERS and _TOKEN.fullmatch(value) and name not in seen:
            kept.append(f"{name}={value.lower()}")
            seen.add(name)
    return "; ".join(kept)


async def _whole(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _stored(blobs: BlobStore, ref: BlobRef) -> BlobRef | None:
    """`ref` if its bytes are stored, else None; BlobError if the store cannot tell.

    Blobs are content-addressed: when the store moved since the record was written, its
    own copy of the same sha256 is the same bytes (checked again while streaming).
    """
    try:
        if await blobs.exists(ref):
            return ref
    except BlobRefRefused:
        pass
    else:
        return None
    here = BlobRef(blobs.url_for(ref.sha256), ref.size, ref.sha256, ref.media_type)
    return here if await blobs.exists(here) else None
