"""AMP training: the loss-scaled step, the run loop and the msrun launcher.

The stage's entry is ``amptool.train.run.run_training``, also ``from amptool import train``.
"""
