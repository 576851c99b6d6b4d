"""amptool: mixed-precision training, FP16 export and parity gates for MindSpore."""
import os as _os

# MindSpore logs plugin-probe warnings (no Ascend/GPU libraries) at import; keep them to
# errors unless the user asked for more.
_os.environ.setdefault("GLOG_v", "3")

__version__ = "0.1.0"
