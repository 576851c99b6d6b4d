"""The old spelling of ``amptool.documents.figures``, kept for one release: import from there."""
import warnings as _warnings

from amptool.documents.figures import *  # noqa: F401,F403

_warnings.warn("amptool.figures moved to amptool.documents.figures; "
               "the old name goes in the next release", DeprecationWarning, stacklevel=2)
