"""Checkpoint files: format by content, one clear error for corrupt files, one writer."""
import os
import stat

import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.network.checkpoint import (detect_format, meta_of, read_checkpoint,
                                        write_checkpoint)
from amptool.runtime.device import import_mindspore

W = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.array([0.5, -1.0, 2.0], np.float16)


def _items():
    ms = import_mindspore()
    return [{"name": "fc.weight", "data": ms.Tensor(W)},
            {"name": "fc.bias", "data": ms.Parameter(ms.Tensor(B), name="fc.bias")}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny ckpt and safetensors file written by MindSpore itself."""
    ms = import_mindspore()
    folder = tmp_path_factory.mktemp("ckpts")
    paths = {}
    for fmt in ("ckpt", "safetensors"):
        paths[fmt] = folder / f"tiny.{fmt}"
        ms.save_checkpoint(_items(), str(paths[fmt]), format=fmt)
    return paths


def test_detect_format_by_content(files, tmp_path):
    assert detect_format(files["ckpt"]) == "ckpt"
    assert detect_format(files["safetensors"]) == "safetensors"
    renamed = tmp_path / "weights.bin"
    renamed.write_bytes(files["safetensors"].read_bytes())
    assert detect_format(renamed) == "safetensors"
    (tmp_path / "empty").write_bytes(b"")
    assert detect_format(tmp_path / "empty") == "ckpt"
    with pytest.raises(UsageError, match="cannot read"):
        detect_format(tmp_path / "absent.ckpt")


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_read_checkpoint_values(files, fmt):
    params = read_checkpoint(files[fmt])
    weights = {name: value.asnumpy() for name, value in params.items()
               if hasattr(value, "asnumpy")}
    assert sorted(weights) == ["fc.bias", "fc.weight"]
    np.testing.assert_array_equal(weights["fc.weight"], W)
    np.testing.assert_array_equal(weights["fc.bias"], B)
    assert weights["fc.bias"].dtype == np.float16


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
@pytest.mark.parametrize("keep", [0.5, 20])
def test_truncated_checkpoint(files, tmp_path, fmt, keep):
    raw = files[fmt].read_bytes()
    cut = tmp_path / f"cut.{fmt}"
    cut.write_bytes(raw[:int(len(raw) * keep) if keep < 1 else keep])
    with pytest.raises(UsageError) as err:
        read_checkpoint(cut)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"checkpoint {cut} cannot be read as ")
    assert "truncated or corrupt" in text


def test_garbage_and_missing_checkpoint(tmp_path):
    (tmp_path / "junk.ckpt").write_bytes(b"\x00not a checkpoint" * 8)
    with pytest.raises(UsageError, match="truncated or corrupt"):
        read_checkpoint(tmp_path / "junk.ckpt")
    with pytest.raises(UsageError, match="does not exist"):
        read_checkpoint(tmp_path / "absent.ckpt")


META = {"model": "lenet5", "epoch": 3, "best_acc": 0.5}


def test_write_checkpoint_ckpt_keeps_string_meta(tmp_path):
    path = tmp_path / "best.ckpt"
    write_checkpoint(path, _items(), META, fmt="ckpt")
    assert detect_format(path) == "ckpt"
    params = read_checkpoint(path)
    assert params["model"] == "lenet5"
    assert meta_of(params) == {"epoch": 3, "best_acc": 0.5, "model": "lenet5"}
    np.testing.assert_array_equal(params["fc.weight"].asnumpy(), W)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["best.ckpt"]


def test_write_checkpoint_safetensors_keeps_string_meta(tmp_path):
    meta = {**META, "optimizer": "momentum", "model": "my_net.py:build_é"}
    path = tmp_path / "best.safetensors"
    write_checkpoint(path, _items(), meta, fmt="safetensors")
    assert detect_format(path) == "safetensors"
    params = read_checkpoint(path)
    assert meta_of(params) == {"epoch": 3, "best_acc": 0.5, "model": "my_net.py:build_é",
                               "optimizer": "momentum"}
    np.testing.assert_array_equal(params["fc.bias"].asnumpy(), B)
    assert os.listdir(tmp_path) == ["best.safetensors"]
    # the file holds tensors only (what safetensors allows): the text is UTF-8 bytes
    raw = import_mindspore().load_checkpoint(str(path), format="safetensors")
    assert bytes(raw["amptool_text.optimizer"].asnumpy()) == b"momentum"
    assert "optimizer" not in raw and all(hasattr(v, "asnumpy") for v in raw.values())


def test_write_checkpoint_overwrites_read_only(tmp_path):
    path = tmp_path / "last.ckpt"
    write_checkpoint(path, _items(), {"epoch": 1})
    os.chmod(path, 0o400)
    write_checkpoint(path, _items(), {"epoch": 2})
    assert meta_of(read_checkpoint(path))["epoch"] == 2


def test_read_checkpoint_recognises_content_not_suffix(tmp_path):
    path = tmp_path / "model.ckpt"
    write_checkpoint(path, _items(), {"epoch": 4}, fmt="safetensors")
    assert detect_format(path) == "safetensors"
    params = read_checkpoint(path)
    np.testing.assert_array_equal(params["fc.weight"].asnumpy(), W)


def _run_python(code: str, env_extra: dict | None = None):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


@pytest.mark.slow  # a fresh interpreter imports onnx, onnxruntime and MindSpore
def test_checkpoint_reads_the_same_after_onnx_is_imported(files):
    """The reported order: the ONNX export path imports onnx and onnxruntime (which load
    protobuf) before MindSpore. protobuf then kept its upb parser, which cannot take a
    message past 2 GiB (a 2.55 GB .ckpt read as 'corrupted'); amptool asks for the
    pure-python parser MindSpore needs before anything loads protobuf."""
    pytest.importorskip("onnx")
    code = f"""
import amptool.artefact.onnx as fmt
fmt.require_onnx()  # what export --format ONNX does first
from amptool.network.checkpoint import protobuf_implementation, read_checkpoint
params = read_checkpoint({str(files['ckpt'])!r})
print(protobuf_implementation(), sorted(k for k in params))
"""
    done = _run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "python", done.stdout


@pytest.mark.slow  # a fresh interpreter imports MindSpore
def test_a_parser_that_cannot_take_the_file_is_named_not_corruption(tmp_path):
    """Past 2 GiB under a parser with that limit (a process that chose upb itself): one
    line naming the parser and the fix, not 'truncated or corrupt'. The file is sparse:
    it takes no disk."""
    from amptool.network.checkpoint import PROTOBUF_LIMIT

    big = tmp_path / "big.ckpt"
    with open(big, "wb") as fh:
        fh.truncate(PROTOBUF_LIMIT + 4096)
    code = f"""
from amptool.network.checkpoint import read_checkpoint
from amptool.errors import UsageError
try:
    read_checkpoint({str(big)!r})
except UsageError as exc:
    print(exc)
"""
    done = _run_python(code, {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "upb"})
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip()
    assert "\n" not in line and "corrupt" not in line, line
    assert "2.15 GB, past the 2 GiB that protobuf's 'upb' parser" in line, line
    assert "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python" in line


def test_an_empty_checkpoint_says_so(tmp_path):
    (tmp_path / "empty.ckpt").write_bytes(b"")
    with pytest.raises(UsageError, match=r"is empty \(0 bytes\)"):
        read_checkpoint(tmp_path / "empty.ckpt")


# --- one tensor at a time --------------------------------------------------------------

def _wide_net(ms, seed):
    from mindspore import nn

    ms.set_seed(seed)
    return nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))


def test_streamed_entries_are_load_checkpoints_own(tmp_path, monkeypatch):
    """Tensors written in slices (MindSpore slices past SLICE_SIZE KiB; 1 KiB here), a crc
    trailer and text entries read the same one at a time as ``load_checkpoint`` reads
    them whole; a network loaded that way holds the saved values, cast where asked."""
    import mindspore.train.serialization as serialization

    from amptool.network.ckptstream import iter_checkpoint, load_streamed

    ms = import_mindspore()
    saved = _wide_net(ms, 0)
    monkeypatch.setattr(serialization, "SLICE_SIZE", 1)
    path = tmp_path / "sliced.ckpt"
    ms.save_checkpoint(saved, str(path), append_dict={"model": "wide", "epoch": 3},
                       crc_check=True)
    whole = ms.load_checkpoint(str(path))
    streamed = dict(iter_checkpoint(path))
    assert list(streamed) == list(whole) and streamed["model"] == "wide"
    for name, value in whole.items():
        if not isinstance(value, str):
            assert np.array_equal(streamed[name].asnumpy(), value.asnumpy()), name
    assert list(iter_checkpoint(path, {"model"}.__contains__)) == [("model", "wide")]
    net = _wide_net(ms, 1)
    load_streamed(net, path, to_dtype=lambda p: ms.float16)
    for a, b in zip(saved.get_parameters(), net.get_parameters()):
        assert b.dtype == ms.float16
        assert np.array_equal(b.asnumpy(), a.asnumpy().astype(np.float16))


def test_streamed_load_refuses_a_checkpoint_that_does_not_fit(files):
    """Missing names and shape mismatches: the one error ``load_into_net`` gives; a
    safetensors file goes through the whole-file reader the same way."""
    from mindspore import nn

    from amptool.network.ckptstream import load_streamed

    for fmt in ("ckpt", "safetensors"):
        net = nn.SequentialCell(nn.Dense(4, 3))
        with pytest.raises(UsageError) as err:
            load_streamed(net, files[fmt], f"checkpoint {fmt}")
        assert err.value.problem.startswith(f"checkpoint {fmt} does not fit the model: 2 missing")



def _derives_from_its_weights():
    """A factory that computes on a fresh weight; nothing in it waits for the product."""
    import planted_branches

    net = planted_branches.Net()
    net.doubled = net.fc.weight * 2.0
    return net


def _branch_scale(net) -> float:
    """The scaled branch's largest weight over fc's (2 as MindSpore initializes them)."""
    return (float(np.abs(net.block.a.weight.asnumpy()).max())
            / float(np.abs(net.fc.weight.asnumpy()).max()))


def test_a_factory_computing_on_its_fresh_weights_is_built_as_usual():
    """Built uninitialized, its product fails only when waited for, after the factory
    returned: the attempt waits for it, and the network comes from the usual build."""
    from amptool.network.ckptstream import build_uninitialized

    import_mindspore()
    net = build_uninitialized(_derives_from_its_weights)
    assert np.array_equal(net.doubled.asnumpy(), 2 * net.fc.weight.asnumpy())


@pytest.mark.slow  # builds the planted network 200 times
def test_a_failed_uninitialized_build_leaves_nothing_behind():
    """``tests/planted_branches.py:build`` scales its weights through ``set_data``: built
    uninitialized it fails, and the failed product, still running, used to be reported
    again by a later operation (at times the usual build right after it, as in a test
    process's export). Nothing of it may reach the builds that follow."""
    import planted_branches

    from amptool.network.ckptstream import build_uninitialized

    import_mindspore()
    for _ in range(100):
        assert _branch_scale(build_uninitialized(planted_branches.build)) > 1000.0
        assert _branch_scale(planted_branches.build()) > 1000.0


def _written(path, entries: list, texts: dict) -> None:
    from amptool.network.ckptstream import write_entry

    ms = import_mindspore()
    with open(path, "wb") as fh:
        for name, array in entries:
            write_entry(fh, name, array.shape, str(ms.Tensor(array).dtype), array)
        for name, text in texts.items():
            write_entry(fh, name, [0], "str", np.array(text).tobytes())


ENTRIES = [("fc.weight", W), ("fc.bias", B), ("step", np.arange(4, dtype=np.int32)),
           ("scale", np.array(65536.0, np.float32)), ("mask", np.array([True, False]))]


def test_entries_written_one_at_a_time_are_save_checkpoints_own_bytes(tmp_path):
    """``write_entry`` writes what ``mindspore.save_checkpoint`` writes, byte for byte (its
    ``append_dict`` texts last), and MindSpore reads it back."""
    ms = import_mindspore()
    ms.save_checkpoint([{"name": n, "data": ms.Tensor(a)} for n, a in ENTRIES],
                       str(tmp_path / "theirs.ckpt"), append_dict={"model": "simplecnn"})
    _written(tmp_path / "ours.ckpt", ENTRIES, {"model": "simplecnn"})
    assert (tmp_path / "ours.ckpt").read_bytes() == (tmp_path / "theirs.ckpt").read_bytes()
    back = ms.load_checkpoint(str(tmp_path / "ours.ckpt"))
    assert back["model"] == "simplecnn"
    for name, array in ENTRIES:
        assert np.array_equal(back[name].asnumpy(), array), name


def test_a_tensor_past_a_slice_is_written_in_several_records(tmp_path, monkeypatch):
    """As ``save_checkpoint`` writes a tensor past 512 MiB: consecutive records of one tag,
    read back whole by MindSpore and by the streamed reader; an empty tensor is written
    too (``save_checkpoint`` leaves it out) and read back."""
    import amptool.network.ckptstream as stream

    ms = import_mindspore()
    big = np.arange(1000, dtype=np.float32).reshape(40, 25)
    monkeypatch.setattr(stream, "SLICE_BYTES", 1024)
    path = tmp_path / "sliced.ckpt"
    _written(path, [("big", big), ("empty", np.zeros((0, 3), np.float32))], {})
    import mmap

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        tags = [tag for tag, *_ in stream._records(mapped, path.stat().st_size)]
    assert tags == ["big"] * 4 + ["empty"]  # 4000 bytes in slices of 1024, then empty
    back = ms.load_checkpoint(str(path))
    streamed = dict(stream.iter_checkpoint(path))
    for got in (back, streamed):
        assert np.array_equal(got["big"].asnumpy(), big)
        assert got["empty"].shape == (0, 3)


def test_the_wire_walk_reads_what_protobuf_writes():
    """Every field of a serialized ``Checkpoint.Value``, by number and bytes; a cut one is
    refused."""
    from mindspore.train.checkpoint_pb2 import Checkpoint

    from amptool.files.protowire import WireError, delimited, fields, read_varint, varint_bytes

    value = Checkpoint.Value()
    value.tag = "fc.weight"
    value.tensor.dims.extend([300, 2])
    value.tensor.tensor_type = "Float32"
    value.tensor.tensor_content = b"\x01" * 2400
    data = value.SerializeToString()
    top = list(fields(data, 0, len(data)))
    assert [n for n, *_ in top] == [1, 2]
    assert data[top[0][2]:top[0][3]] == b"fc.weight"
    inner = [(n, data[v:a]) for n, _, v, a in fields(data, top[1][2], top[1][3])]
    assert [n for n, _ in inner] == [1, 1, 2, 3] and inner[2][1] == b"Float32"
    assert [read_varint(b, 0, len(b))[0] for _, b in inner[:2]] == [300, 2]
    assert delimited(1, b"fc.weight") == data[:top[0][3]]
    assert read_varint(varint_bytes(2 ** 40 + 5), 0, 6)[0] == 2 ** 40 + 5
    with pytest.raises(WireError):
        list(fields(data, 0, len(data) - 1))


def test_the_record_walk_reads_what_protobuf_parses(tmp_path):
    """Each record's tag, dims, type and the place of its bytes, read from keys and lengths
    alone, are what protobuf parses from the record (dims packed too); a map parameter is
    left to the whole-file reader."""
    import mmap

    from mindspore.train.checkpoint_pb2 import Checkpoint

    import amptool.network.ckptstream as stream

    ms = import_mindspore()
    path = tmp_path / "w.ckpt"
    _written(path, ENTRIES, {"model": "simplecnn"})
    parsed = Checkpoint()
    parsed.ParseFromString(path.read_bytes())
    data = path.read_bytes()
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        walked = list(stream._records(mapped, len(data)))
    assert len(walked) == len(parsed.value) == len(ENTRIES) + 1
    for (tag, dims, kind, (start, stop)), value in zip(walked, parsed.value):
        assert (tag, dims, kind) == (value.tag, list(value.tensor.dims),
                                     value.tensor.tensor_type)
        assert data[start:stop] == value.tensor.tensor_content

    from amptool.files.protowire import delimited, varint_bytes

    packed = delimited(1, varint_bytes(3) + varint_bytes(300)) + delimited(2, b"Float32") + \
        delimited(3, b"\0" * 3600)
    assert stream._tensor_fields(packed, 0, len(packed))[:2] == ([3, 300], "Float32")

    mapped_entry = Checkpoint()
    value = mapped_entry.value.add()
    value.tag = "table"
    value.maptensor.tensor.add(tensor_type="Int64", tensor_content=b"\0" * 8).dims.append(1)
    (tmp_path / "map.ckpt").write_bytes(mapped_entry.SerializeToString())
    with open(tmp_path / "map.ckpt", "rb") as fh, \
            mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        with pytest.raises(stream._Unstreamable, match="map parameter"):
            list(stream._records(mapped, len(mapped)))
    assert ms is not None


def test_an_entry_is_read_into_its_tensor_once(tmp_path):
    """Reading a 16 MB entry allocates its bytes once (tracemalloc sees numpy's buffers):
    the tensor takes the array the file was read into, with no record bytes, parsed copy or
    second buffer beside it; the values are the saved ones."""
    import tracemalloc

    from amptool.network.ckptstream import iter_checkpoint

    ms = import_mindspore()
    big = np.random.default_rng(0).standard_normal((1024, 4096)).astype(np.float32)
    path = tmp_path / "big.ckpt"
    ms.save_checkpoint([{"name": "big", "data": ms.Tensor(big)}], str(path))
    tracemalloc.start()
    try:
        (name, tensor), = list(iter_checkpoint(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert name == "big" and np.array_equal(tensor.asnumpy(), big)
    assert big.nbytes <= peak < 1.25 * big.nbytes, peak / big.nbytes
