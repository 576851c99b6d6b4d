"""Precision policies, casting networks and checkpoints, and the FP32-cell search."""
