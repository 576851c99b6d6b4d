"""A training run: its folder (run.json, the best and last checkpoints) and the trained model
it holds.

Owns ``RunDir`` (``rundir``) and ``TrainedModel`` (``trained``: network, checkpoint, policy
and preprocessing together), which export, parity and convert read. May import every core
package below it: ``amptool.data``, ``amptool.precision``, ``amptool.network``,
``amptool.documents`` and the rest.
"""
