"""The job graph of ``agentgrpo ablate``: which processes a variants × seeds grid runs,
which are finished, and running the rest a few at a time.

Every unit of work is one ``agentgrpo`` command in its own process (its own memory, its
own torch threads; killing the grid kills nothing half-written: checkpoints and
evaluation logs are atomic or append-only):

- ``sft/seed<S>``: the SFT checkpoint seed S's runs start from (``--sft`` skips these),
- ``sft/seed<S>/eval``: its evaluation (the "SFT" row and the pairing baseline),
- ``<setting>/seed<S>/<experiment>``: a GRPO run, then ``.../eval`` its evaluation.

A job whose output exists is skipped; an SFT or GRPO run with checkpoints but no ``final/``
is resumed (``sft --resume``, ``train --resume``); an evaluation with a partial log is resumed
(``eval --resume``). Jobs whose inputs exist run ``jobs`` at a time, torch threads split
between them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo.config import DataError
from agentgrpo.progress import progress_bar

FINAL_MARKER = "agentgrpo.json"
"""Written last into a model directory (``final/``): its presence means the run finished."""


@dataclass
class Job:
    """One command, what it needs first, and the file whose existence means it is done."""

    name: str
    command: list[str]
    done_file: Path
    needs: list[str] = field(default_factory=list)
    log: Path | None = None

    @property
    def done(self) -> bool:
        return self.done_file.is_file()


def cli(*args: str) -> list[str]:
    """An ``agentgrpo`` command run with this interpreter (works without the console script)."""
    return [sys.executable, "-m", "agentgrpo.cli", *args]


def sft_job(out: Path, seed: int, overrides: list[str]) -> Job:
    from agentgrpo.train.checkpoint import can_continue

    run_dir = out / "sft" / f"seed{seed}"
    resume = ["--resume"] if can_continue(run_dir) else []  # killed after its first save (of any SFT round)
    return Job(f"sft/seed{seed}", cli("sft", *resume, *overrides, f"seed={seed}", f"run_dir={run_dir}",
                                      "progress=false"), run_dir / "final" / FINAL_MARKER)


def grpo_job(run_dir: Path, name: str, experiment: str, seed: int, init: Path, overrides: list[str],
             needs: list[str]) -> Job:
    from agentgrpo.train.checkpoint import can_continue

    resume = ["--resume"] if can_continue(run_dir) else []  # killed after its first save
    command = cli("train", *resume, f"experiment={experiment}", *overrides, f"seed={seed}",
                  f"policy.init={init}", f"run_dir={run_dir}", "logging.progress=false")
    return Job(name, command, run_dir / "final" / FINAL_MARKER, needs)


def eval_job(policy: Path, out_dir: Path, name: str, overrides: list[str], needs: list[str]) -> Job:
    resume = ["--resume"] if (out_dir / "transcripts.jsonl").is_file() else []
    command = cli("eval", *resume, "--policy", str(policy), "--out", str(out_dir), *overrides, "progress=false")
    return Job(name, command, out_dir / "eval.json", needs)


def run_jobs(jobs: list[Job], parallel: int, log_dir: Path, report: Callable[[str], None] | None = None,
             progress: bool = True) -> list[str]:
    """Run the unfinished jobs, ``parallel`` at a time, each once its ``needs`` are done.

    Returns the names of the jobs that failed (their logs say why); jobs that need a
    failed one are not started. Output of each job goes to ``log_dir/<name>.log``. A
    progress bar counts the jobs to run, with the time left at the rate so far; ``report``
    gets each started / finished line (default: printed above the bar).
    """
    finished = {job.name for job in jobs if job.done}
    with progress_bar(len(jobs) - len(finished), "ablate jobs", enabled=progress) as bar:
        return _run_graph(jobs, parallel, log_dir, report or bar.write, bar)


def _run_graph(jobs: list[Job], parallel: int, log_dir: Path, report: Callable[[str], None], bar: Any) -> list[str]:
    by_name = {job.name: job for job in jobs}
    unknown = {need for job in jobs for need in job.needs} - set(by_name)
    if unknown:
        raise DataError(f"ablate: jobs need unknown jobs {sorted(unknown)}")
    finished = {job.name for job in jobs if job.done}
    failed: list[str] = []
    todo = [job for job in jobs if job.name not in finished]
    report(f"ablate: {len(finished)} of {len(jobs)} jobs already done, {len(todo)} to run, {parallel} at a time")
    cores = os.cpu_count() or 1
    running: dict[Future, Job] = {}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        while todo or running:
            blocked = [job for job in todo if any(need in failed for need in job.needs)]
            for job in blocked:
                todo.remove(job)
                failed.append(job.name)
                report(f"  skipped {job.name}: it needs a failed job")
                bar.update(1, failed=len(failed))
            ready = [job for job in todo if all(need in finished for need in job.needs)]
            # jobs that others wait for go first (a GRPO run before an evaluation), so the grid
            # ends on evaluations in every slot, not on one run and then its evaluation alone
            ready.sort(key=lambda job: not any(job.name in other.needs for other in todo))
            starting = ready[: parallel - len(running)]
            threads = threads_per_job(cores, parallel, len(running) + len(starting))
            for job in starting:
                todo.remove(job)
                running[pool.submit(_run_one, job, log_dir, threads)] = job
                report(f"  started {job.name}" + (f" ({threads} threads)" if threads > cores // parallel else ""))
            if not running:
                if todo:  # nothing can start: a dependency cycle or a need that is never done
                    raise DataError(f"ablate: jobs {[job.name for job in todo]} can never start")
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                seconds, ok = future.result()
                if ok:
                    finished.add(job.name)
                else:
                    failed.append(job.name)
                report(f"  {'finished' if ok else 'FAILED'} {job.name} in {seconds:.0f} s"
                       + ("" if ok else f" (log: {log_path(job, log_dir)})"))
                bar.update(1, running=len(running), failed=len(failed))
    return failed


def threads_per_job(cores: int, parallel: int, running: int) -> int:
    """Threads for a job started while ``running`` jobs (itself included) share the machine.

    A job that runs alone, like the shared SFT every GRPO run waits for, gets all the cores;
    otherwise each of the ``parallel`` slots gets its share. (A job given all the cores keeps
    them if another becomes ready while it runs: a brief oversubscription, never in a grid
    whose lone jobs are the ones everything else needs.)
    """
    return max(1, cores // max(1, min(parallel, running)))


def log_path(job: Job, log_dir: Path) -> Path:
    """Where ``job``'s output goes: its own ``log`` or ``log_dir/<name with / as __>.log``."""
    return job.log or log_dir / (job.name.replace("/", "__") + ".log")


def _run_one(job: Job, log_dir: Path, threads: int) -> tuple[float, bool]:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_path(job, log_dir)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(job.command)}\n")
        handle.flush()
        result = subprocess.run(job.command, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False)
    return time.perf_counter() - start, result.returncode == 0 and job.done
