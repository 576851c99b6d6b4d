"""One rank of a sharded parity, started by msrun:
``python -m amptool.parity.shardworker CONFIG``.

``CONFIG`` is the JSON the launcher wrote beside the pickled ``ParityConfig`` (the MindIR
key, if any, comes through the environment): the shard folder, each rank's span of the
samples and the device. The rank compares its span (``shard.compare_shard``) and leaves its
states in the shard folder; its status file says ``done`` or the error
(``amptool.runtime.msjob.worker_main``).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import sys
from pathlib import Path

from amptool.runtime.device import execution_mode, import_mindspore, set_device
from amptool.runtime.jobwatch import Status
from amptool.runtime.msjob import worker_main


def _work(spec: dict, status: Status, config_dir: Path) -> dict:
    from amptool.parity.compare import open_all
    from amptool.parity.shard import KEY_ENV, compare_shard, write_state

    cfg = pickle.loads((config_dir / "config.pkl").read_bytes())  # this job's own file
    key = os.environ.get(KEY_ENV)
    if key:
        cfg = dataclasses.replace(cfg, key=bytes.fromhex(key))
    import_mindspore()
    with execution_mode(graph=False):
        set_device(spec["device"], graph=False)
        sides = open_all(cfg)  # a broken side fails here, on its own
        from mindspore.communication import get_rank, init

        status.write(phase="joining")
        init()
        rank = get_rank()
        status.write(phase="ready", rank=rank)
        span = tuple(spec["spans"][rank])
        folder = Path(spec["folder"])
        write_state(folder, rank, compare_shard(cfg, sides, span, folder))
    return {"rank": rank, "span": list(span)}


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    config = Path(args[0])
    return worker_main(config, lambda spec, status: _work(spec, status, config.parent))


if __name__ == "__main__":
    sys.exit(main())
