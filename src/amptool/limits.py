"""The old spelling of ``amptool.stats.limits``, kept for one release: import from there."""
import warnings as _warnings

from amptool.stats.limits import *  # noqa: F401,F403

_warnings.warn("amptool.limits moved to amptool.stats.limits; "
               "the old name goes in the next release", DeprecationWarning, stacklevel=2)
