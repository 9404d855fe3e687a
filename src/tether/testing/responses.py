"""An ASGI response that paces its chunks and can drop the connection part-way.

Starlette's StreamingResponse always finishes the body. To simulate an upstream that
dies mid-reply we return from the ASGI call without sending the final (empty) body
message; uvicorn then closes the transport, so the client sees a truncated chunked
body: the same thing it sees when a real provider's connection drops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class PacedResponse(Response):
    """Send `chunks` with optional delays; stop after `cut_after` chunks if given."""

    def __init__(
        self,
        chunks: Sequence[bytes],
        *,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
        first_delay: float = 0.0,
        chunk_delay: float = 0.0,
        cut_after: int | None = None,
        content_length: int | None = None,
    ) -> None:
        super().__init__(
            content=None, status_code=status_code, headers=headers, media_type=media_type
        )
        self.chunks = list(chunks)
        self.first_delay = first_delay
        self.chunk_delay = chunk_delay
        self.cut_after = cut_after
        if content_length is not None:
            # A declared length the body never reaches makes a cut non-streaming body
            # detectable by the client (it fails instead of parsing half a document).
            self.headers["content-length"] = str(content_length)
        elif "content-length" in self.headers:
            del self.headers["content-length"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": self.status_code,
                "headers": self.raw_headers,
            }
        )
        if self.first_delay:
            await asyncio.sleep(self.first_delay)
        for sent, chunk in enumerate(self.chunks):
            if self.cut_after is not None and sent >= self.cut_after:
                return  # uvicorn closes the connection: the reply is cut here.
            if sent and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self.cut_after is not None:
            return  # Every chunk went out, but the body is still never terminated.
        await send({"type": "http.response.body", "body": b"", "more_body": False})
