"""amptool's benchmarks: ``python -m bench`` runs them all (see bench/run.py)."""
import shutil
import sys
from pathlib import Path


def amptool_command() -> list:
    """The ``amptool`` command of this interpreter's environment (``python -m amptool``
    where it has no script)."""
    script = shutil.which("amptool", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "amptool"]
