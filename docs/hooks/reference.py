"""MkDocs hook: pages generated from the code, so the docs cannot drift from it.

A page holding one of these markers gets it replaced at build time:

- `<!-- tether:cli -->`: every `tether` command and option, from the CLI's own parser;
- `<!-- tether:http -->`: every HTTP route, parameter and answer, from the OpenAPI document
  `tether serve` publishes at `/openapi.json`;
- `<!-- tether:proto -->`: the record format, the `.proto` file itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, make in (
        ("<!-- tether:cli -->", cli_reference),
        ("<!-- tether:http -->", http_reference),
        ("<!-- tether:proto -->", proto_reference),
    ):
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


def _parser() -> argparse.ArgumentParser:
    from tether.cli import app as cli

    parser: argparse.ArgumentParser = cli.build_parser()
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.extend(action.choices.items())
    return found


def _options(parser: argparse.ArgumentParser) -> str:
    rows = ["| argument | default | what it does |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.dest}`"
        if action.metavar and action.option_strings:
            names += f" `{action.metavar}`"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) else f"`{default}`"
        what = (action.help or "").replace("|", "\\|").replace("\n", " ")
        if action.choices and not isinstance(action.choices, dict):
            what += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
        rows.append(f"| {names} | {shown} | {what} |")
    return "\n".join(rows) if len(rows) > 2 else "No arguments."


def cli_reference() -> str:
    parser = _parser()
    out = [f"```text\n{parser.format_usage().strip()}\n```", "", _options(parser), ""]

    def walk(prefix: str, p: argparse.ArgumentParser) -> None:
        for name, sub in _subcommands(p):
            full = f"{prefix} {name}"
            out.extend([f"## `{full}`", "", sub.description or "", ""])
            out.extend([f"```text\n{sub.format_usage().strip()}\n```", "", _options(sub), ""])
            walk(full, sub)

    walk("tether", parser)
    return "\n".join(out)


def http_reference() -> str:
    from tether.server.openapi import document

    doc = document()
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            out.extend([f"## `{method.upper()} {path}`", "", op.get("summary", ""), ""])
            if op.get("security") == []:
                out.extend(["No credentials needed.", ""])
            params = op.get("parameters", [])
            if params:
                out.append("| parameter | in | required | schema | what |")
                out.append("|---|---|---|---|---|")
                for p in params:
                    schema = json.dumps(p.get("schema", {}), sort_keys=True).replace("|", "\\|")
                    req = "yes" if p.get("required") else "no"
                    what = p.get("description", "")
                    out.append(f"| `{p['name']}` | {p['in']} | {req} | `{schema}` | {what} |")
                out.append("")
            if "requestBody" in op:
                for media, content in op["requestBody"]["content"].items():
                    schema = content.get("schema", {})
                    if "$ref" in schema:
                        name = schema["$ref"].rsplit("/", 1)[1]
                        out.append(f"Body ({media}): `{name}` (see the schemas below).")
                    else:
                        out.append(f"Body ({media}): `{json.dumps(schema, sort_keys=True)}`")
                out.append("")
            out.extend(["| status | answer |", "|---|---|"])
            for status, answer in op["responses"].items():
                out.append(f"| {status} | {answer.get('description', '')} |")
            out.append("")
    out.extend(["## Schemas", ""])
    for name, schema in doc["components"]["schemas"].items():
        text = json.dumps(schema, indent=2, sort_keys=True)
        out.extend([f"### `{name}`", "", f"```json\n{text}\n```", ""])
    return "\n".join(out)


def proto_reference() -> str:
    text = (ROOT / "proto/tether/v1/records.proto").read_text()
    return f"```protobuf\n{text}\n```"
