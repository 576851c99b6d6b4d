"""The one error hierarchy. The CLI turns each into a single stderr line and an exit code.

Exit codes:
  0  success
  1  a check ran and failed (parity breach, diverged training, failed worker, diff regression,
     ledger drift, unverified artefact, graph contradicting its policy)
  2  usage or input error (bad option, missing file, unfit data, wrong device)
  3  internal error (a bug: anything that is not an AmpToolError; AMPTOOL_DEBUG=1 shows it)
  130 interrupted
"""


class AmpToolError(Exception):
    """Base error: ``str(err)`` is one line naming the problem and the fix."""

    exit_code = 2

    def __init__(self, problem: str, fix: str = ""):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


class UsageError(AmpToolError):
    """A bad option, path, model, data set or config value."""


class DeviceError(AmpToolError):
    """The requested device or format cannot be used on this host."""


class CheckFailed(AmpToolError):
    """A check ran and failed: parity, diff, ledger drift, verify, export audit, inspect.

    A parity breach (``parity``, ``run``), a diverged training, a regression against BASE
    (``diff``), a figure drifted past its budget (``ledger trend --max-drift``), bytes that
    did not pass (``verify``), an exported graph contradicting its policy (``export``'s
    audit), an artefact that does not match its manifest or audit (``inspect``)."""

    exit_code = 1


class DivergedError(CheckFailed):
    """Training diverged (too many skipped steps, or a non-finite loss without scaling)."""


class WorkerFailed(CheckFailed):
    """A distributed worker failed or never started."""


def raise_problems(problems) -> None:
    """Raise one UsageError naming every ``(problem, fix)`` of ``problems``; nothing when
    there is none. One problem is raised with its own fix; several as their problems joined
    by "; ", their fixes likewise (each once). Every config's ``validate`` reports so."""
    problems = list(problems)
    if problems:
        fixes = list(dict.fromkeys(fix for _, fix in problems if fix))
        raise UsageError("; ".join(problem for problem, _ in problems), "; ".join(fixes))


def problems_of(check, *args) -> list:
    """``[(problem, fix)]`` of the UsageError ``check(*args)`` raises; empty when it raises
    none (the checks a ``validate`` gathers)."""
    try:
        check(*args)
    except UsageError as exc:
        return [(exc.problem, exc.fix)]
    return []


DEBUG_ENV = "AMPTOOL_DEBUG"
"""Set to 1 for tracebacks instead of one-line summaries, and to keep MindSpore's dumps."""

NET_TRACE = "The Traceback of Net Construct Code"
"""What MindSpore's graph compiler puts in every error it raises about a network's code."""


def debugging() -> bool:
    import os

    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def network_error(exc: BaseException):
    """A MindSpore graph-compile error about a network's code, as one UsageError line naming
    the problem and the innermost source line outside MindSpore; None for anything else."""
    import re
    import sys
    from pathlib import Path

    text = str(exc)
    if NET_TRACE not in text:
        return None
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    frames = re.findall(r"# \d+ In file (.+?):(\d+)", text)
    own = {str(Path(file).parent) for name, m in list(sys.modules.items())
           if name.partition(".")[0] == "amptool" and (file := getattr(m, "__file__", None))}
    outside = [f for f in frames if "/mindspore/" not in f[0].replace("\\", "/")
               and str(Path(f[0]).parent) not in own]
    where = outside[-1:]  # MindSpore names no user line for a syntax it cannot parse
    at = f" (at {Path(where[0][0]).name}:{where[0][1]})" if where else ""
    return UsageError(f"the network does not compile: {first.rstrip('.')}{at}",
                      f"fix the model's construct or the inputs it is given; "
                      f"{DEBUG_ENV}=1 shows MindSpore's full report")


def first_line(exc: BaseException) -> str:
    """The line of an exception's message that says what went wrong (at most 200
    characters): MindSpore's banner lines ("-----", "- Kernel select failed:") skipped,
    and the types it got appended where a kernel refuses a data type."""
    lines = [line.strip() for line in str(exc).splitlines()]
    said = [line for line in lines if line and line.strip("-= ") and not (
        line.startswith("- ") and line.endswith(":"))]
    if not said:
        return type(exc).__name__
    first = said[0]
    got = next((line.rpartition(", but get ")[2] for line in said[1:] if ", but get " in line),
               "")
    return (f"{first.rstrip('.!')}, got {got}" if got else first)[:200]
