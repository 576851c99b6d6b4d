"""The old spelling of ``amptool.documents.training``, kept for one release: import from there."""
import warnings as _warnings

from amptool.documents.training import *  # noqa: F401,F403

_warnings.warn("amptool.trainsummary moved to amptool.documents.training; "
               "the old name goes in the next release", DeprecationWarning, stacklevel=2)
