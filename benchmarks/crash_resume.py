"""Crash and resume: a study stopped by SIGKILL, SIGTERM and SIGINT, and one whose journal is
cut mid-record, resumes with every completed trial intact.

    python benchmarks/crash_resume.py            # 3 to 6 minutes on a busy two-core machine

For each fault: ``palm-tune tune --workers 2`` on a journal file runs a study of about a second
a trial; once at least two trials are complete and one is simulating, the fault is applied.
Then ``palm-tune tune --trials 2`` resumes the same study. The table prints the trials by state
before the fault, after it, and after the resume, and whether every trial that was complete
before the fault is still complete (same number, same value) after the resume. docs/tuning.md
("Guarantees") quotes its output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

REPO = Path(__file__).resolve().parents[1]
STUDY = """
[study]
name = "crash"
base = "{base}"
set = ["training.global_batch=1024"]
sampler = "random"
trials = 40
seed = 0

[space]
hardware = {{ inter_tile_link_gbps = {{ low = 128, high = 512 }} }}
"""
FAULTS = ("SIGKILL", "SIGTERM", "SIGINT", "torn record")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _trials(journal: Path) -> list[optuna.trial.FrozenTrial]:
    """The trials as Optuna itself reads the file (no repair, no write)."""
    storage = JournalStorage(JournalFileBackend(str(journal)))
    return optuna.load_study(study_name="crash", storage=storage).get_trials(deepcopy=False)


def _counts(trials: list[optuna.trial.FrozenTrial]) -> str:
    by = {s: sum(t.state == s for t in trials) for s in TrialState}
    return (
        f"{by[TrialState.COMPLETE]:>3} complete {by[TrialState.RUNNING]:>2} running "
        f"{by[TrialState.FAIL]:>2} failed"
    )


def _complete(trials: list[optuna.trial.FrozenTrial]) -> dict[int, float]:
    return {t.number: t.values[0] for t in trials if t.state == TrialState.COMPLETE}


def _run_until_simulating(study: Path, journal: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "search.cli", "tune", str(study), "--storage", str(journal),
         "--workers", "2", "--no-progress"],
        cwd=journal.parent, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tune ended early: {proc.communicate()[1]}")
        if journal.exists() and journal.stat().st_size:
            trials = _trials(journal)
            done = sum(t.state == TrialState.COMPLETE for t in trials)
            busy = any(t.state == TrialState.RUNNING and "config" in t.user_attrs for t in trials)
            if done >= 2 and busy:
                return proc
        time.sleep(0.1)
    raise RuntimeError("no trial completed in 300 s")


def _fault(fault: str, study: Path, journal: Path) -> tuple[str, str, str]:
    """Apply ``fault``; returns the trial counts just before it, and the exit code and
    stderr's last line of the stopped run."""
    proc = _run_until_simulating(study, journal)
    at_fault = _counts(_trials(journal))
    if fault == "torn record":
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        data = journal.read_bytes()
        last = data.rstrip(b"\n").rfind(b"\n") + 1
        journal.write_bytes(data[: last + (len(data) - last) // 2])  # half the last record
        size = len(data) - last
        return at_fault, "-", f"last record cut to {size // 2} of its {size} bytes"
    if fault == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    else:
        proc.send_signal(getattr(signal, fault))
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    return at_fault, str(proc.returncode), (lines[-1] if lines else "")


def _resume(study: Path, journal: Path) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "search.cli", "tune", str(study), "--storage", str(journal),
         "--trials", "2", "--no-progress"],
        cwd=journal.parent, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"resume failed: {r.stderr}")
    notes = [line for line in r.stderr.splitlines() if line.startswith("palm-tune: journal")]
    return notes[0].split(": ", 2)[-1] if notes else ""


def main() -> int:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    ok = True
    print(f"{'fault':<12} {'before the fault':<32} {'after it':<32} {'after resume':<32} intact")
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "crash.toml"
        study.write_text(STUDY.format(base=REPO / "examples" / "wafer-t18b.toml"), "utf-8")
        details = []
        for fault in FAULTS:
            journal = Path(tmp) / f"{fault.replace(' ', '-')}.journal"
            at_fault, code, line = _fault(fault, study, journal)
            stopped = _trials(journal)
            note = _resume(study, journal)
            resumed = _trials(journal)
            before = _complete(stopped)
            after = _complete(resumed)
            intact = all(after.get(n) == v for n, v in before.items())
            ok &= intact and len(after) == len(before) + 2
            print(
                f"{fault:<12} {at_fault:<32} {_counts(stopped):<32} "
                f"{_counts(resumed):<32} {'yes' if intact else 'NO'}"
            )
            details.append(f"{fault}: exit {code}, {line!r}; resume: {note or 'no repair needed'}")
        print()
        for d in details:
            print(d)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
