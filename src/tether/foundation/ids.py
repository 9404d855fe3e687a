"""Stable ids: a successor's id is a function of its parent's id and a key, never of timing.

Run ids and sub-agent keys, whatever made them (a caller, `ctx.run_child(key=...)`, a fork,
an import, a schedule), are checked here, against one character set and one length:
letters, digits, `_`, `-` and `:`, starting with a letter or digit. A sub-agent run's id
joins its parent's id, the node's id and its key with `.`, which nothing else may hold; so
an id never carries a line break, a `/`, a quote or a space into a URL, a header, an SSE
stream or a log line.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from tether.foundation.errors import BadRunId

ROOT_ID = "root"

# An empty hasher, copied for each id: 0.34 us an id where making one with its digest size
# as a keyword took 0.47 (one per successor a node spawns). Never updated itself.
_EMPTY = hashlib.blake2b(digest_size=8)


def child_id(parent_id: str, key: str) -> str:
    """The id of successor `key` of `parent_id`: 16 hex digits, short at any depth."""
    h = _EMPTY.copy()
    h.update(f"{parent_id}/{key}".encode())
    return h.hexdigest()


# One part of an id: a top-level run's id, a node's id, a sub-agent key.
PART = r"[A-Za-z0-9][A-Za-z0-9_:-]*"
_PART = re.compile(PART)
_ANY = re.compile(rf"{PART}(?:\.{PART})*")
MAX_RUN_ID = 128  # a top-level run's id
MAX_KEY = 64  # a sub-agent key
MAX_ANY_RUN_ID = 400  # any run id, a sub-agent run's (many levels deep) included
_RULE = "use letters, digits, '_', '-' and ':' (starting with a letter or digit)"


def check_run_id(run_id: str) -> str:
    """`run_id` if it is a valid top-level run id (a caller's, a fork's, an import's, a
    schedule's); BadRunId naming the rule otherwise."""
    if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_RUN_ID:
        raise BadRunId(f"run id {run_id!r}: must be 1 to {MAX_RUN_ID} characters")
    if _PART.fullmatch(run_id) is None:
        raise BadRunId(f"run id {run_id!r}: {_RULE}")
    return run_id


def check_child_key(key: str) -> str:
    """`key` if it is a valid sub-agent key ("" for none); BadRunId naming it otherwise."""
    if not isinstance(key, str) or len(key) > MAX_KEY:
        raise BadRunId(f"sub-agent key {key!r}: must be at most {MAX_KEY} characters")
    if key and _PART.fullmatch(key) is None:
        raise BadRunId(f"sub-agent key {key!r}: {_RULE}; no '.', '/' or spaces")
    return key


def check_any_run_id(run_id: str) -> str:
    """`run_id` if it is a valid run id, a sub-agent run's (`run.node.key`) included."""
    if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_ANY_RUN_ID:
        raise BadRunId(f"run id {run_id!r}: must be 1 to {MAX_ANY_RUN_ID} characters")
    if _ANY.fullmatch(run_id) is None:
        raise BadRunId(f"run id {run_id!r}: {_RULE}, its parts joined by '.'")
    return run_id


def child_run_id(run_id: str, node_id: str, key: str = "") -> str:
    """The run id of a sub-agent run started by node `node_id` of run `run_id`; BadRunId
    if `key` is not a valid sub-agent key or the id would be too long."""
    check_child_key(key)
    return check_any_run_id(f"{run_id}.{node_id}" + (f".{key}" if key else ""))


def parent_node_of(child: str, parent_run_id: str) -> str | None:
    """The node of `parent_run_id` that started sub-agent run `child`, if it is one."""
    if not child.startswith(parent_run_id + "."):
        return None
    return child[len(parent_run_id) + 1 :].split(".", 1)[0] or None


def check_child_run_id(child: str, parent_run_id: str) -> str:
    """`child` if it is a valid run id that names a sub-agent run of `parent_run_id`: the
    parent's id, a node's id and at most one key; BadRunId otherwise."""
    check_any_run_id(child)
    rest = child.removeprefix(parent_run_id + ".")
    if rest == child or len(rest.split(".")) > 2:
        raise BadRunId(f"run id {child!r}: not named as a sub-agent run of {parent_run_id!r}")
    return child


def new_run_id() -> str:
    """A fresh run id."""
    return uuid.uuid4().hex[:20]
