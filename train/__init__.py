"""AMP training: the loss-scaled step, the run loop and the msrun launcher.

Callable: ``amptool.train(TrainConfig(...))`` is ``amptool.train.run.run_training``.
"""
from amptool.entry import make_callable

make_callable(__name__, "amptool.train.run:run_training")
