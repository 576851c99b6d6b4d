"""One data-parallel worker, started by msrun: ``python -m amptool.train.worker CONFIG``.

``CONFIG`` is the JSON TrainConfig the launcher wrote to ``<out>/logs/config.json``.
msrun runs this module twice over: once as its scheduler (``MS_ROLE=MS_SCHED``), where
``init()`` serves the cluster and ends the process, and once per worker. Each process
reports through a small status file beside its log (``rank_<R>.json``,
``scheduler.json``): phase ``started`` -> ``joining`` (calling ``init()``) -> ``ready`` ->
``done`` with
its summary, or ``failed`` with the error. The lead rank also prints one
``amptool-event {json}`` line per training event into its log, which the launcher follows.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

EVENT_PREFIX = "amptool-event "


def status_path(logs: Path, rank) -> Path:
    return logs / ("scheduler.json" if rank is None else f"rank_{rank}.json")


class Status:
    """This process's status file, rewritten atomically at every phase."""

    def __init__(self, logs: Path, rank):
        self.path = status_path(logs, rank)
        self.state = {"rank": rank, "pid": os.getpid(), "phase": "started",
                      "started": time.time()}

    def write(self, **fields) -> None:
        from amptool.fileio import write_json

        self.state.update(fields)
        write_json(self.path, self.state)


def _emit(event: dict) -> None:
    print(EVENT_PREFIX + json.dumps(event, default=str), flush=True)


def _serve_scheduler(logs: Path, serves: bool) -> int:
    if not serves:  # several nodes on one host: node 0's scheduler serves, this one is idle
        return 0
    status = Status(logs, None)
    status.write()
    from amptool.device import import_mindspore

    import_mindspore()
    from mindspore.communication import init

    init()  # serves the cluster until every worker has left
    return 0


def _train(cfg, status: Status, lead_ranks: set) -> dict:
    from amptool.device import import_mindspore, resolve_device, set_device

    ms = import_mindspore()
    set_device(resolve_device(cfg.device))
    from amptool.models import resolve_model

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


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    config_path = Path(args[0])
    logs = config_path.parent
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        spec = json.loads(config_path.read_text(encoding="utf-8"))
        return _serve_scheduler(logs, spec.get("serves_scheduler", True))
    env_rank = os.environ.get("RANK_ID")
    status = Status(logs, int(env_rank) if env_rank is not None else os.getpid())
    status.write()
    from amptool.errors import AmpToolError
    from amptool.train.config import TrainConfig

    try:
        spec = json.loads(config_path.read_text(encoding="utf-8"))
        cfg = TrainConfig(**spec["config"])
        summary = _train(cfg, status, set(spec["lead_ranks"]))
    except AmpToolError as exc:
        print(f"amptool: error: {exc}", file=sys.stderr, flush=True)
        status.write(phase="failed", error=str(exc), error_type=type(exc).__name__,
                     problem=exc.problem, fix=exc.fix, exit_code=exc.exit_code)
        return exc.exit_code
    except Exception as exc:  # a crash: keep the traceback in the log, the gist in the status
        traceback.print_exc()
        sys.stderr.flush()
        status.write(phase="failed", error=f"{type(exc).__name__}: {exc}"[:300],
                     error_type="crash", exit_code=1)
        return 1
    status.write(phase="done", summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
