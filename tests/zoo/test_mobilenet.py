"""The zoo's checks (checks.py) on mobilenet_v3_small_100."""
from .checks import *  # the test functions

NAMES = ["mobilenet_v3_small_100"]
