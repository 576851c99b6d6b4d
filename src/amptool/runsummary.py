"""The old spelling of ``amptool.documents.summary``, kept for one release: import from there."""
import warnings as _warnings

from amptool.documents.summary import *  # noqa: F401,F403

_warnings.warn("amptool.runsummary moved to amptool.documents.summary; "
               "the old name goes in the next release", DeprecationWarning, stacklevel=2)
