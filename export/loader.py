"""The trained model an export is made of: model, weights, policy and preprocessing.

``--run DIR`` reads all of it from the training run (``run.json`` and ``best``/``last``
checkpoint), with ``--model`` (and its ``--model-arg``/``--input-spec``) in place of the
run's model where given; ``--ckpt FILE --model NAME`` takes it from options.
``--policy``/``--amp-level``
replace the run's policy in the export, while the manifests keep the run's own as
``source_policy``.
"""
from __future__ import annotations

from amptool.precision.policy import policy_for
from amptool.runs.trained import from_checkpoint, from_run


def load_trained(cfg) -> tuple:
    """(the ``TrainedModel`` an ``ExportConfig`` names, the policy the export is built
    from: the model's own unless ``cfg`` overrides it)."""
    if cfg.run:
        trained = from_run(cfg.run, cfg.which, model=cfg.model, model_args=cfg.model_args,
                           input_spec=cfg.input_spec)
    else:
        trained = from_checkpoint(cfg.ckpt, cfg.model, cfg.data, cfg.val_fraction,
                                  cfg.model_args, cfg.input_spec)
    return trained, policy_for(cfg.policy, cfg.amp_level, base=trained.policy)
