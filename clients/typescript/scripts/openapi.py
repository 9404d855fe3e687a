"""Write the OpenAPI document `tether serve` publishes at /openapi.json to a file.

    python3 scripts/openapi.py openapi.json      # from clients/typescript
    python3 scripts/openapi.py -                 # to standard output

The client's types (src/openapi.ts) are generated from this file; scripts/check-generated.mjs
fails when either has drifted from the server's code.
"""

from __future__ import annotations

import json
import sys

from tether.server.openapi import document


def main(path: str) -> None:
    text = json.dumps(document(), indent=2, ensure_ascii=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "-")
