"""The old spelling of ``amptool.documents.parity``, kept for one release: import from there."""
import warnings as _warnings

from amptool.documents.parity import *  # noqa: F401,F403

_warnings.warn("amptool.parityreport moved to amptool.documents.parity; "
               "the old name goes in the next release", DeprecationWarning, stacklevel=2)
