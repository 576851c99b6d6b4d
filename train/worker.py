"""One data-parallel worker, started by msrun: ``python -m amptool.train.worker CONFIG``.

``CONFIG`` is the JSON TrainConfig the launcher wrote to ``<out>/logs/config.json``.
msrun runs this module twice over: once as its scheduler (``MS_ROLE=MS_SCHED``), where
``init()`` serves the cluster and ends the process, and once per worker. Each process
reports through its status file (``amptool.runtime.jobwatch.Status``), ``done`` with its summary.
The lead rank also prints one ``amptool-event {json}`` line per training event into its
log, which the launcher follows.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from amptool.documents.events import Event
from amptool.runtime.device import import_mindspore, resolve_device, set_device
from amptool.runtime.jobwatch import EVENT_PREFIX, Status
from amptool.runtime.msjob import worker_main
from amptool.train.config import TrainConfig


def _emit(event: Event) -> None:
    print(EVENT_PREFIX + json.dumps(event.to_dict(), default=str), flush=True)


def _train(cfg, status: Status, lead_ranks: set) -> dict:
    ms = import_mindspore()
    set_device(resolve_device(cfg.device))
    from amptool.network.models import resolve_model

    # a broken model fails here, on its own, not in a collective
    resolve_model(cfg.model, cfg.model_args, cfg.input_spec)
    from mindspore.communication import get_group_size, get_rank, init

    status.write(phase="joining")
    init()
    rank, world = get_rank(), get_group_size()
    status.write(phase="ready", rank=rank, world=world)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    from .loop import train_model

    on_event = _emit if rank in lead_ranks else None
    return train_model(cfg, on_event=on_event, rank=rank, world=world).to_dict()


def _work(spec: dict, status: Status) -> dict:
    return _train(TrainConfig(**spec["config"]), status, set(spec["lead_ranks"]))


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return worker_main(Path(args[0]), _work)


if __name__ == "__main__":
    sys.exit(main())
