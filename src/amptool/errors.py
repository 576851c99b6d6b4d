"""The one error hierarchy. The CLI turns each into a single stderr line and an exit code.

Exit codes:
  0  success
  1  a check failed (parity breach, diverged training, failed worker)
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
    """A numerical check failed: parity breach, diverged training."""

    exit_code = 1


class DivergedError(CheckFailed):
    """Training diverged (too many skipped steps, or a non-finite loss without scaling)."""


class WorkerFailed(CheckFailed):
    """A distributed worker failed or never started."""
