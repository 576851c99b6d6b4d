"""``python -m bench``: every benchmark, bench/results.json and one table of ratios."""
import sys

from bench.run import main

sys.exit(main())
