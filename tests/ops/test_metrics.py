"""Prometheus metrics scraped over HTTP from a real `tether serve` and `tether worker`."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.server.kit import TOKEN, child_env, start_server
from tether.foundation import metrics

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a scrape (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_:]+)(?:\{(.*)\})? (\S+)", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))) == want:
            return float(m.group(3))
    return 0.0


def wait_scrape(url: str, ready: str, headers: dict[str, str] | None = None) -> str:
    """Scrape until a line starting with `ready` has a non-zero value (60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        text = httpx.get(url, headers=headers or {}, timeout=10).text
        if any(ln.startswith(ready) and not ln.endswith(" 0.0") for ln in text.splitlines()):
            return text
        assert time.monotonic() < deadline, f"no {ready} in 60 s:\n{text}"
        time.sleep(0.2)


def test_metrics_names_follow_prometheus_conventions() -> None:
    m = metrics.Metrics()
    names = {family.name for family in m.registry.collect()}
    # The families operators' dashboards read, by name: the loop below checks them all.
    assert {
        "tether_runs",
        "tether_runs_started",
        "tether_runs_finished",
        "tether_node_duration_seconds",
        "tether_append_duration_seconds",
        "tether_appends",
        "tether_claims",
        "tether_lease_renewals",
        "tether_sse_streams_active",
    } <= names, sorted(names)
    for family in m.registry.collect():
        assert family.name.startswith("tether_"), family.name
        # A counter's samples are exposed as `<name>_total` (prometheus_client adds it).
        assert not family.name.endswith("_total"), family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name


def test_server_metrics_over_http(tmp_path: Path) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--speed", "0")
    try:
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        r = httpx.post(
            f"{server.url}/v1/runs", headers=AUTH, json={"agent": "demo", "input": "why?"}
        )
        assert r.status_code == 202, r.text
        text = wait_scrape(f"{server.url}/metrics", 'tether_runs{status="succeeded"}', AUTH)
    finally:
        server.stop()
    assert sample(text, "tether_runs_started_total") >= 1
    assert sample(text, "tether_runs_finished_total", status="succeeded") >= 1
    assert sample(text, "tether_claims_total") >= 1
    assert sample(text, "tether_append_duration_seconds_count", kind="node_completed") >= 1
    assert sample(text, "tether_appends_total", kind="run_started") >= 1
    kinds = re.findall(r'tether_node_duration_seconds_count\{kind="(\w+)"\} (\S+)', text)
    assert kinds and all(float(n) >= 1 for _, n in kinds)
    tokens = re.findall(
        r'tether_model_tokens_total\{direction="input",model="([^"]+)"\} (\S+)', text
    )
    assert tokens and float(tokens[0][1]) > 0, text
    assert "tether_sse_streams_active 0.0" in text
    assert 'tether_append_errors_total{error="StaleEpoch"}' not in text


def test_worker_metrics_over_http(tmp_path: Path, pg_database: str) -> None:
    # Leases are renewed only while a run is held: the demo's paced latencies (over 2 s
    # of sleeps at 0.5) keep it held across several renewals of a 1 s lease (every 1/3 s),
    # however fast the host. At speed 0 a fast host finished it between two renewals.
    env = child_env({"TETHER_DEMO_SPEED": "0.5"})
    base = [sys.executable, "-m", "tether", "--db", pg_database, "--blobs", str(tmp_path / "b")]
    run_id = subprocess.run(
        [*base, "submit", "demo", "--input", '"why?"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    proc = subprocess.Popen(
        [*base, "worker", "--metrics-port", "0", "--lease-ttl", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    url = ""
    for line in proc.stdout:
        if " metrics on " in line:
            url = line.split()[-1]
        if " ready on " in line:
            break
    try:
        assert url, "the worker did not say where its metrics are"
        text = wait_scrape(url, 'tether_runs_finished_total{status="succeeded"}')
        text = wait_scrape(url, "tether_lease_renewals_total")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert run_id
    assert sample(text, "tether_claims_total") >= 1
    assert sample(text, "tether_runs_started_total") >= 1
