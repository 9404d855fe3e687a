"""The console's HTML: plain HTML, CSS and JS shipped in the package, filled in one pass.

A template's placeholders are filled in one pass (a value is never read for more
placeholders), each value escaped for where it goes. Scripts and styles are inline and
allowed by their hashes, so each page's Content-Security-Policy admits them and nothing
else; a page may only connect to its own origin (the API, its event stream).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources

from starlette.responses import HTMLResponse

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
STYLE = "console.css"
# Every page signs in the same way: the token lives in the tab's sessionStorage.
COMMON_JS = "auth.js"
CHALLENGE = b'Bearer realm="tether"'


@cache
def asset(name: str) -> str:
    return resources.files("tether.server").joinpath("static", name).read_text()


@cache
def inlined(name: str) -> str:
    """A script or style inlined raw: it must not contain what would end its element."""
    text = asset(name)
    if "</script" in text.lower() or "</style" in text.lower():
        raise RuntimeError(f"static/{name} contains a closing tag; it cannot be inlined")
    return text


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@cache
def csp(scripts: tuple[str, ...]) -> str:
    script_src = " ".join(_hash(inlined(s)) for s in scripts) or "'none'"
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {script_src}",
            f"style-src {_hash(inlined(STYLE))}",
            "connect-src 'self'",
            "img-src 'self' data:",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def render(template: str, values: dict[str, str]) -> str:
    """Fill `{{name}}` placeholders in one pass; a name without a value is a bug."""
    fill: Callable[[re.Match[str]], str] = lambda m: values[m.group(1)]  # noqa: E731
    return PLACEHOLDER.sub(fill, template)


def page(
    template: str,
    values: dict[str, str],
    *,
    scripts: Sequence[str] = (),
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """A page from static/<template>: `{{css}}` and `{{js}}` are filled in here."""
    scripts = tuple(scripts)
    js = "".join(f"<script>{inlined(s)}</script>" for s in scripts)
    body = render(asset(template), {**values, "css": inlined(STYLE), "js": js})
    return HTMLResponse(
        body,
        status,
        headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": csp(scripts),
            **(headers or {}),
        },
    )


def missing_run_page(run_id: str) -> HTMLResponse:
    """Said once, plainly: a page that kept retrying an unknown run would never stop."""
    return page("missing.html", {"run_id": html.escape(run_id)}, status=404)


def sign_in_page(wrong: bool) -> HTMLResponse:
    """The 401 a browser gets for a page: a form that keeps the token for this tab."""
    note = "That token was not accepted; try again." if wrong else ""
    return page(
        "signin.html",
        {"note": html.escape(note)},
        scripts=(COMMON_JS, "signin.js"),
        status=401,
        headers={"WWW-Authenticate": CHALLENGE.decode()},
    )
