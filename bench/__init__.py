"""amptool's benchmarks: ``python -m bench`` runs them all (see bench/run.py)."""
