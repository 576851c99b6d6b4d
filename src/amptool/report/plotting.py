"""matplotlib for the ``--plot`` charts: optional, imported only when a chart is asked for."""
from __future__ import annotations

from amptool.errors import UsageError
from amptool.files.fileio import atomic_path


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or one error saying how to install it."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise UsageError("--plot needs matplotlib, which is not installed",
                         "pip install 'amptool[plot]' (or matplotlib), or drop --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str) -> None:
    """Write ``fig`` as a PNG at ``path`` atomically and close it."""
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(str(tmp), dpi=110)
    pyplot().close(fig)
