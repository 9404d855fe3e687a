"""Regenerate the console screenshots in docs/images/ (the docs and the README show them).

Starts `tether serve` on a throwaway SQLite store with the demo agent (its scripted model,
no network), runs a few demo runs (one paused by its budget, one that waits for a person's
approval, and a fork of that one), and photographs the console in headless Chromium
(Debian's chromium and chromium-driver, as the browser tests use):

    python scripts/screenshots.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
TOKEN = "screenshots-0123456789"
WAIT_S = 120


def serve(home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "--db", f"sqlite:///{home / 'tether.db'}",
         "--blobs", str(home / "blobs"), "serve", "--demo", "--port", "0", "--token", TOKEN],
        cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:  # readiness is a handshake: the server prints its URL
        if line.startswith("tether serve: listening on "):
            return proc, line.split()[4]
    raise SystemExit(f"tether serve exited {proc.wait()}")


def api(url: str, method: str = "GET", body: object = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, object] = json.loads(answer.read())
        return result


def start(url: str, input: object, budget: dict[str, int] | None = None) -> str:
    body = {"agent": "demo", "input": input, **({"budget": budget} if budget else {})}
    return str(api(f"{url}/v1/runs", "POST", body)["run_id"])


def approval_run(home: Path, url: str) -> tuple[str, str]:
    """`tether demo --approve` (not at a terminal: the run parks at its approval), answered
    after a while through the API, then forked before its calc node ran; both run to the
    end on the server. The ids of the run and its fork."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run(
        [sys.executable, "-m", "tether", "--db", f"sqlite:///{home / 'tether.db'}",
         "--blobs", str(home / "blobs"), "demo", "--approve", "--quiet", "--budget", "wall=60"],
        cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=WAIT_S, check=True,
    ).stdout  # fmt: skip
    run_id = next(line.split()[2] for line in out.splitlines() if line.startswith("run id: "))
    time.sleep(8)  # a person reading what the run asks: time the run spends waiting
    view = api(f"{url}/v1/runs/{run_id}")
    key = view["waits"][0]["key"]  # type: ignore[index]
    api(f"{url}/v1/runs/{run_id}/signals/{key}", "POST", {"approve": True})
    wait_for(lambda: api(f"{url}/v1/runs/{run_id}")["status"] == "succeeded", run_id)
    nodes = api(f"{url}/v1/runs/{run_id}")["nodes"]
    calc = next(n["node_id"] for n in nodes if n["kind"] == "tool:calc")  # type: ignore[attr-defined]
    time.sleep(5)  # the fork comes later: its source's age is not its wall time
    fork_id = str(api(f"{url}/v1/runs/{run_id}/fork", "POST", {"before_node": calc})["run_id"])
    wait_for(lambda: api(f"{url}/v1/runs/{fork_id}")["status"] == "succeeded", fork_id)
    return run_id, fork_id


def photograph_run(driver: WebDriver, url: str, run_id: str, name: str) -> None:
    """A finished run's page, down to its budget bars, once they show the API's numbers."""
    driver.get(f"{url}/runs/{run_id}")
    records = api(f"{url}/v1/runs/{run_id}")["records"]
    wait_for(
        lambda: driver.execute_script(
            "const box = document.getElementById('budget');"  # null while signing in
            "return !!box && box.dataset.records === arguments[0]",
            str(records),
        ),
        f"the budget of {run_id}",
    )
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(IMAGES / f"console-{name}.png"))


def wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.2)  # polling a browser or the API: there is no event to wait on


def browser() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1200", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(Path(tmp))
        try:
            prompts = ["Why checkpoint agent runs?", "How do agents survive a deploy?"]
            ids = [start(url, {"prompt": p}) for p in prompts]
            paused = start(url, {"prompt": "Budgets?"}, {"max_nodes": 3})
            for run_id in ids:
                wait_for(
                    lambda r=run_id: api(f"{url}/v1/runs/{r}")["status"] == "succeeded", run_id
                )
            wait_for(lambda: api(f"{url}/v1/runs/{paused}")["status"] == "paused", paused)
            approved, fork = approval_run(Path(tmp), url)
            driver = browser()
            try:
                driver.get(url + "/")
                driver.find_element(By.ID, "signin-token").send_keys(TOKEN, Keys.ENTER)
                wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) >= 3,
                         "the runs list")  # fmt: skip
                driver.save_screenshot(str(IMAGES / "console-runs.png"))
                driver.get(f"{url}/runs/{ids[0]}")
                wait_for(
                    lambda: driver.execute_script(
                        "return window.tetherState && window.tetherState.finished"
                    ),
                    "the run page",
                )
                # Clicked in the page: the graph redraws as the sub-agent list arrives, so an
                # element found a moment before may be gone.
                driver.execute_script(
                    "const nodes = [...document.querySelectorAll('#graph g.node')];"
                    "const pick = nodes.filter(n => n.ariaLabel.includes('report'));"
                    "(pick.length ? pick : nodes).pop().dispatchEvent("
                    "new MouseEvent('click', {bubbles: true}));"
                )
                driver.execute_script("window.scrollTo(0, 0)")
                time.sleep(1)  # let the image in the panel load before the picture is taken
                driver.save_screenshot(str(IMAGES / "console-run.png"))
                # The history slider moved back a third of the way: fewer nodes done.
                slider = driver.find_element(By.ID, "at")
                back = int(slider.get_attribute("max") or 0) * 2 // 3
                slider.send_keys(Keys.END, *[Keys.ARROW_LEFT] * back)
                wait_for(
                    lambda: driver.execute_script(
                        "return document.body.classList.contains('past')"
                    ),
                    "the history slider",
                )
                driver.execute_script("document.getElementById('history').scrollIntoView()")
                time.sleep(1)  # let the image in the panel load before the picture is taken
                driver.save_screenshot(str(IMAGES / "console-history.png"))
                driver.get(f"{url}/runs/{paused}")
                wait_for(
                    lambda: driver.execute_script(
                        "return window.tetherState && window.tetherState.status === 'paused'"
                    ),
                    "pause",
                )
                driver.find_element(By.ID, "resume").click()
                driver.save_screenshot(str(IMAGES / "console-paused.png"))
                photograph_run(driver, url, approved, "approval")
                photograph_run(driver, url, fork, "fork")
            finally:
                driver.quit()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    for name in ("runs", "run", "history", "paused", "approval", "fork"):
        print(IMAGES / f"console-{name}.png")


if __name__ == "__main__":
    main()
