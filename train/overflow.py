"""``--policy auto`` and forward-overflow forensics for a training run (``loop._TrainingRun``)."""
from __future__ import annotations

import numpy as np

from amptool.errors import DivergedError

AUTO_BATCHES = 2
"""Training batches the range pass of ``--policy auto`` runs over."""


def auto_policy(run) -> dict:
    """``--policy auto``: one range pass of the freshly built fp32 network over the first
    training batches (unaugmented, in one call), batch normalizations on those batches'
    statistics as a step normalizes with its batch's, the cells the level keeps in fp32
    kept so in the fp16 probe; its candidates (outputs fp16 cannot hold, cells that break
    when computing in fp16) join the policy's fp32 cells unless it keeps them already."""
    from amptool.data import epoch_batches
    from amptool.policy import make_policy
    from amptool.precision import cell_origins

    cfg, data, base = run.cfg, run.data, run.policy
    positions = [idx for idx, _ in zip(epoch_batches(len(data.train_idx), cfg.batch_size,
                                                     cfg.seed, 0), range(AUTO_BATCHES))]
    found = []
    if base.dtype == "float16":  # bfloat16 has fp32's range: nothing to keep
        joined = data.train_inputs(np.concatenate(positions))  # one eager call
        found = auto_candidates(run.net, joined, base, cfg.range_safety)
    cells = list(base.fp32_cells) + [r.path for r in found]
    run.policy = make_policy(base.level, base.dtype, base.fp32_types, cells, base.fp16_cells)
    where = cell_origins(run.net, [r.path for r in found])
    return {"safety": cfg.range_safety, "batches": len(positions), "file": "policy.auto.toml",
            "kept": [{**r.to_dict(), "where": where.get(r.path, r.type)} for r in found]}


def auto_candidates(net, inputs: list, base, safety: float) -> list:
    """The range pass of ``--policy auto`` over one batch of ``inputs`` of the fp32 network
    ``net`` (batch statistics; the cells ``base`` keeps in fp32 stay so in the fp16 probe):
    the ``CellRange`` of the cells to keep that ``base`` does not keep already."""
    from amptool.precision import resolve_fp32_cells
    from amptool.ranges import measure_ranges, outside_policy, range_candidates

    kept = tuple(resolve_fp32_cells(net, base).values())
    ranges = measure_ranges(net, [inputs], batch_stats=True, fp32_kept=kept)
    return outside_policy(net, range_candidates(ranges, safety=safety), base)


def forward_overflow(run, inputs: list) -> None:
    """The loss itself is not finite (the forward pass overflowed, which no loss scale
    can fix): name the first cell whose low-precision output is not finite while its
    fp32 output is, record it in run.json and stop."""
    from amptool.checkpoint import load_into_net
    from amptool.precision import apply_policy
    from amptool.ranges import first_overflow

    weights = {p.name: p for p in run.net.get_parameters()}
    fp32, low = run.spec.build(), run.spec.build()
    for net in (fp32, low):
        load_into_net(net, weights, "the training weights")
    culprit = first_overflow(fp32, low, apply_policy(low, run.policy), inputs,
                             batch_stats=True)
    steps = f"{run.forward_bad} consecutive steps to step {run.step}"
    if culprit is None:
        problem = (f"the loss is not finite in the forward pass ({steps}), and no cell's "
                   f"{run.policy.dtype} output is where its fp32 output is finite")
        fix = "check the data and the loss for non-finite values"
    else:
        problem = (f"the loss is not finite in the forward pass ({steps}): cell "
                   f"{culprit['path']} ({culprit['type']}) gives non-finite "
                   f"{run.policy.dtype} outputs where its fp32 outputs reach "
                   f"{culprit['fp32_max']:.4g}")
        fix = (f"keep it in fp32 (--policy auto, or fp32_cells = [\"{culprit['path']}\"] "
               f"in a --policy file)")
    if run.lead and run.info is not None:
        run.info["forensics"] = {"kind": "forward_overflow", "step": run.step,
                                 "steps": run.forward_bad, "culprit": culprit}
        run.run_dir.write(run.info)
    kept = f"last good checkpoint kept in {run.out}" if run.last_path.is_file() else \
        "no checkpoint had been written yet"
    raise DivergedError(problem, f"{fix}; {kept}")
