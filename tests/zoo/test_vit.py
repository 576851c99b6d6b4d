"""The zoo's checks (checks.py) on vit."""
from .checks import *  # the test functions

NAMES = ["vit"]
