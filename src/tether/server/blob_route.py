"""GET /v1/blobs/{sha256}?run_id=: a blob some record of that run points to, streamed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tether.blobs import BlobRef
from tether.blobs.base import is_sha256_hex
from tether.errors import UnknownRun
from tether.records import blob_refs, decode_log
from tether.server.schemas import BadRequest

if TYPE_CHECKING:
    from tether.server.app import TetherServer


async def get_blob(request: Request) -> Response:
    server: TetherServer = request.app.state.tether
    sha256 = request.path_params["sha256"]
    run_id = request.query_params.get("run_id")
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
    if not await server.blobs.exists(ref):
        raise BadRequest(404, "blob_missing", f"blob {sha256} is referenced but not stored")
    reader = server.blobs.open(ref)
    return StreamingResponse(
        reader,
        media_type=ref.media_type or "application/octet-stream",
        headers={"Content-Length": str(ref.size), "ETag": f'"{sha256}"'},
    )
