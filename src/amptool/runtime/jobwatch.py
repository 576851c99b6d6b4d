"""Follow one msrun job to its end: status files, the lead rank's events, dead processes.

The job stops (every process msrun started killed by process group) as soon as one rank
reports a failure, dies without finishing, or has not joined the cluster in time. Each
process msrun starts reports through a small status file beside its log (``Status``:
``rank_<R>.json``, ``scheduler.json``): phase ``started`` -> ``joining`` (calling
``init()``) -> ``ready`` -> ``done`` with its result, or ``failed`` with the error. The
lead rank may print one ``amptool-event {json}`` line per event into its log, which the
job follows.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

from amptool import errors
from amptool.errors import AmpToolError, WorkerFailed
from amptool.files.fileio import write_json

EVENT_PREFIX = "amptool-event "
POLL_S = 0.2
SHUTDOWN_GRACE_S = 60.0
_EXIT_LINE = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")
_ERROR_LINE = re.compile(r"^\s*([\w.]*(Error|Exception|Exit)\b.*)$")


def status_path(logs: Path, rank) -> Path:
    return logs / ("scheduler.json" if rank is None else f"rank_{rank}.json")


class Status:
    """One process's status file, rewritten atomically at every phase."""

    def __init__(self, logs: Path, rank):
        self.path = status_path(logs, rank)
        self.state = {"rank": rank, "pid": os.getpid(), "phase": "started",
                      "started": time.time()}

    def write(self, **fields) -> None:
        self.state.update(fields)
        write_json(self.path, self.state)


def _alive(pid: int, born: Optional[float]) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        if born is not None and abs(proc.create_time() - born) > 0.01:
            return False  # the pid now belongs to another process
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _born(pid: int) -> Optional[float]:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


class Job:
    """msrun and everything it starts; ``follow`` returns when every local rank is done."""

    def __init__(self, command: list, env: dict, logs: Path, ranks: list, world: int,
                 start_timeout: float, hosts_scheduler: bool):
        self.command, self.env, self.logs = command, env, logs
        self.ranks, self.world = ranks, world
        self.start_timeout, self.hosts_scheduler = start_timeout, hosts_scheduler
        self.states: dict = {}
        self.proc: Optional[subprocess.Popen] = None
        self.born: dict = {}  # pid -> create time, for every pid we have heard of
        self.ours: set = set()  # pids seen as msrun's descendants: the ones stop() may kill
        self._offset, self._partial = 0, ""

    @property
    def _started(self) -> subprocess.Popen:
        """msrun's process, which ``follow`` starts before anything asks for it."""
        assert self.proc is not None, "msrun has not been started"
        return self.proc

    # -- running -------------------------------------------------------------------------
    def follow(self, emit: Callable[[dict], None]) -> None:
        with open(self.logs / "msrun.log", "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True)
        self.born[self.proc.pid] = _born(self.proc.pid)
        (self.logs / "launch.json").write_text(json.dumps(
            {"msrun_pid": self.proc.pid, "command": self.command}, indent=2) + "\n")
        t0, done_at = time.monotonic(), None
        while True:
            self._snapshot()
            self._read_states()
            self._follow(emit)
            failure = self._failure(time.monotonic() - t0)
            if failure is not None:
                raise failure
            rc = self.proc.poll()
            if all(self._phase(r) == "done" for r in self.ranks):
                done_at = done_at or time.monotonic()
                if rc is not None or time.monotonic() - done_at > SHUTDOWN_GRACE_S:
                    self._follow(emit)
                    return
            elif rc is not None:
                time.sleep(POLL_S)  # let the last status files land, then judge once more
                self._read_states()
                raise self._failure(time.monotonic() - t0) or WorkerFailed(
                    f"msrun exited with code {rc} before every rank finished "
                    f"(log: {self.logs / 'msrun.log'})",
                    "see that log and the worker logs beside it")
            time.sleep(POLL_S)

    def _snapshot(self) -> None:
        import psutil

        try:
            for child in psutil.Process(self._started.pid).children(recursive=True):
                self.born.setdefault(child.pid, _born(child.pid))
                self.ours.add(child.pid)
        except psutil.Error:
            pass

    def _read_states(self) -> None:
        for key in [*self.ranks, None]:
            path = status_path(self.logs, key)
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if state.get("pid") and state["pid"] not in self.born:
                self.born[state["pid"]] = _born(state["pid"])
            self.states[key] = state

    def _phase(self, rank) -> Optional[str]:
        return self.states.get(rank, {}).get("phase")

    def _follow(self, emit: Callable[[dict], None]) -> None:
        """Pass the lead rank's ``amptool-event`` lines on, as they are written."""
        path = self.worker_log(self.ranks[0])
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
                self._offset = fh.tell()
        except OSError:
            return
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(EVENT_PREFIX):
                try:
                    emit(json.loads(line[len(EVENT_PREFIX):]))
                except ValueError:
                    pass

    # -- judging -------------------------------------------------------------------------
    def worker_log(self, rank: int) -> Path:
        return self.logs / f"worker_{rank}.log"

    def _failure(self, elapsed: float) -> Optional[AmpToolError]:
        for rank in self.ranks:
            if self._phase(rank) == "failed":
                return self._reported(rank, self.states[rank])
        dead = [r for r in self.ranks if self._phase(r) in ("started", "joining", "ready")
                and not _alive(self.states[r]["pid"], self.born.get(self.states[r]["pid"]))]
        if dead:
            self._read_states()  # it may have written 'failed' just before it went
            failed = [r for r in dead if self._phase(r) == "failed"]
            if failed:
                return self._reported(failed[0], self.states[failed[0]])
            return self._crashed(dead)
        sched = self.states.get(None)
        if (self.hosts_scheduler and sched and not _alive(sched["pid"], self.born.get(sched["pid"]))
                and not all(self._phase(r) == "done" for r in self.ranks)):
            log = self.logs / "scheduler.log"
            return WorkerFailed(f"msrun's scheduler exited before the job finished"
                                f"{self._gist(log)} (log: {log})", self._fix())
        if elapsed > self.start_timeout:
            return self._late()
        return None

    def _late(self) -> Optional[WorkerFailed]:
        """Ranks that never reached ``init()``; else the cluster itself did not form."""
        late = [r for r in self.ranks if self._phase(r) in (None, "started")]
        if late:
            rank = late[0]
            who = f"rank {rank}" if len(late) == 1 else f"ranks {', '.join(map(str, late))}"
            return WorkerFailed(f"{who} of {self.world} did not start within "
                                f"{self.start_timeout:g} s{self._gist(self.worker_log(rank))} "
                                f"(log: {self.worker_log(rank)})", self._fix())
        joining = [r for r in self.ranks if self._phase(r) == "joining"]
        if joining:
            log = self.logs / ("scheduler.log" if self.hosts_scheduler else "msrun.log")
            return WorkerFailed(f"the cluster did not form within {self.start_timeout:g} s: "
                                f"rank {joining[0]} of {self.world} still waits for the others"
                                f" (log: {self.worker_log(joining[0])})",
                                f"check that every host started with the same --master-addr/"
                                f"--master-port and see {log}")
        return None

    def _reported(self, rank: int, state: dict) -> AmpToolError:
        log = self.worker_log(rank)
        kind = getattr(errors, state.get("error_type", ""), None)
        if isinstance(kind, type) and issubclass(kind, AmpToolError):
            return kind(f"rank {rank}: {state.get('problem', state.get('error'))}",
                        state.get("fix") or f"see {log}")
        return WorkerFailed(f"rank {rank} of {self.world} crashed: {state.get('error')} "
                            f"(log: {log})", self._fix())

    def _exit_codes(self, pids: set) -> dict:
        """Exit codes msrun logged for these pids; msrun looks once a second, so wait a bit."""
        deadline = time.monotonic() + 2.5
        while True:
            codes: dict = {}
            try:
                text = (self.logs / "msrun.log").read_text(errors="replace")
                for pid, code in _EXIT_LINE.findall(text):
                    codes.setdefault(int(pid), int(code))
            except OSError:
                pass
            if pids & set(codes) or self._started.poll() is not None \
                    or time.monotonic() > deadline:
                return codes
            time.sleep(POLL_S)

    def _crashed(self, dead: list) -> WorkerFailed:
        codes = self._exit_codes({self.states[r]["pid"] for r in dead})
        named = [r for r in dead if self.states[r]["pid"] in codes]
        rank = named[0] if named else dead[0]
        code = codes.get(self.states[rank]["pid"])
        how = (f"was killed by signal {-code}" if code is not None and code < 0 else
               f"exited with code {code}" if code is not None else "died")
        log = self.worker_log(rank)
        return WorkerFailed(f"rank {rank} of {self.world} {how} before finishing"
                            f"{self._gist(log)} (log: {log})", self._fix())

    @staticmethod
    def _gist(log: Path) -> str:
        """The last error-looking line of a log, as ': <line>'."""
        try:
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-200:]
        except OSError:
            return ""
        for line in reversed(lines):
            match = _ERROR_LINE.match(line)
            if match and not line.startswith(EVENT_PREFIX):
                return ": " + match.group(1).strip()[:160]
        return ""

    def _fix(self) -> str:
        return "see that log; the whole job was stopped"

    # -- stopping ------------------------------------------------------------------------
    def stop(self) -> None:
        """Kill whatever is left: each worker's process group, then msrun's own group."""
        if self.proc is None:
            return
        self._snapshot()
        self._read_states()
        own_group = os.getpgrp()
        for pid in sorted(self.ours):
            if _alive(pid, self.born.get(pid)):
                self._kill_group(pid, own_group)
        if self.proc.poll() is None:
            self._kill_group(self.proc.pid, own_group)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._record()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p, self.born.get(p)) for p in self.ours):
            time.sleep(0.05)

    def _record(self) -> None:
        path = self.logs / "launch.json"
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            info = {}
        info["pids"] = sorted(self.ours | {self._started.pid})
        path.write_text(json.dumps(info, indent=2) + "\n")

    @staticmethod
    def _kill_group(pid: int, own_group: int) -> None:
        try:
            group = os.getpgid(pid)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
