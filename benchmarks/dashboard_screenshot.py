"""Screenshot of the best trial's page in optuna-dashboard, in a real headless browser.

    python benchmarks/dashboard_screenshot.py      # writes docs/figures/dashboard-best-trial.png
    python benchmarks/dashboard_screenshot.py --out /tmp/d.png --trials 8

What it does, as a user would:

1. ``palm-tune tune studies/quickstart.toml --trials N`` into a fresh SQLite storage in a
   temporary folder (the best trial gets its trace, Gantt chart and heat map attached);
2. ``palm-tune dashboard --storage ...`` on a free loopback port;
3. asks the dashboard's API which trial is the best and what its artifacts are called;
4. opens ``/dashboard/studies/ID/trials?numbers=N`` (that trial's page) in headless Chromium
   (Debian's ``chromium`` package: ``apt-get install -y chromium``), once with ``--dump-dom``
   to check that the rendered page lists the artifacts, once with ``--screenshot``.

Exit code 0 when the page lists every artifact of the best trial, 1 otherwise, 2 when chromium
or optuna-dashboard is missing. ``tests/search/test_dashboard.py`` runs steps 1-4.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "studies" / "quickstart.toml"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str | None:
    """The Chromium executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PALM_TUNE_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def tune(workdir: Path, *, trials: int, study: Path = QUICKSTART) -> str:
    """Run ``study`` (the quickstart) into ``workdir``; returns its storage URL."""
    storage = f"sqlite:///{workdir}/dashboard.db"
    subprocess.run(
        [sys.executable, "-m", "search.cli", "tune", str(study), "--storage", storage,
         "--trials", str(trials), "--no-progress"],
        cwd=workdir, env=_env(), check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return storage


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback
        return json.loads(response.read())


@contextmanager
def dashboard(storage: str, workdir: Path) -> Iterator[str]:
    """``palm-tune dashboard`` on a free port; yields its base URL."""
    port = _free_port()
    log = (workdir / "dashboard.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "search.cli", "dashboard", "--storage", storage,
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=workdir, env=_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                get_json(f"{base}/api/studies")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((workdir / "dashboard.log").read_text()) from None
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def best_trial_page(base: str) -> tuple[str, int, list[str]]:
    """(URL of the best trial's page, its number, its artifacts' file names)."""
    (summary,) = get_json(f"{base}/api/studies")["study_summaries"]
    study_id = summary["study_id"]
    detail = get_json(f"{base}/api/studies/{study_id}")
    (best,) = detail["best_trials"]
    names = sorted(a["filename"] for a in best["artifacts"])
    url = f"{base}/dashboard/studies/{study_id}/trials?numbers={best['number']}"
    return url, best["number"], names


def browse(url: str, workdir: Path, *, screenshot: Path | None = None) -> str:
    """Load ``url`` in headless Chromium (fresh profile); returns the rendered DOM, or writes
    a screenshot when ``screenshot`` is given."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium")
    profile = tempfile.mkdtemp(prefix="chromium-", dir=workdir)
    what = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    proc = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1350",
         "--virtual-time-budget=15000", *what, url],
        capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs/figures/dashboard-best-trial.png")
    parser.add_argument("--trials", type=int, default=12, help="quickstart trials (default 12)")
    args = parser.parse_args(argv)
    if chromium() is None:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        storage = tune(workdir, trials=args.trials)
        with dashboard(storage, workdir) as base:
            url, number, names = best_trial_page(base)
            dom = browse(url, workdir)
            missing = [n for n in names if n not in dom]
            args.out.parent.mkdir(parents=True, exist_ok=True)
            browse(url, workdir, screenshot=args.out.resolve())
    print(f"best trial {number}: artifacts {', '.join(names)}")
    print(f"page {url.split('/', 3)[3]}: lists {len(names) - len(missing)} of {len(names)}")
    print(f"wrote {args.out}")
    return 1 if missing or not names else 0


if __name__ == "__main__":
    sys.exit(main())
