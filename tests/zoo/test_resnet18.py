"""The zoo's checks (checks.py) on resnet18."""
from .checks import *  # the test functions

NAMES = ["resnet18"]
