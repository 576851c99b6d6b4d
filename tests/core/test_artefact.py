"""Artefact helpers: encryption keys, manifests and the artefact type by suffix."""
import json

import pytest

from amptool.artefact.keys import (ENV_VAR, coerce_key, key_from_env, key_from_file, parse_key,
                                   resolve_key)
from amptool.artefact.runners import artefact_format, infer_precision
from amptool.documents.manifest import manifest_path, read_manifest, summarize_params
from amptool.errors import UsageError

HEX16 = "00112233445566778899aabbccddeeff"


@pytest.mark.parametrize("raw,expected", [
    (HEX16, bytes.fromhex(HEX16)),
    (HEX16.upper() + "\n", bytes.fromhex(HEX16)),
    (("ab" * 24).encode(), bytes.fromhex("ab" * 24)),
    ("cd" * 32, bytes.fromhex("cd" * 32)),
    (bytes(range(16)), bytes(range(16))),
    (bytes(range(100, 132)), bytes(range(100, 132))),
    (b"zyxwvutsrqponmlk\n", b"zyxwvutsrqponmlk"),
])
def test_parse_key(raw, expected):
    key = parse_key(raw, "test")
    assert key == expected and len(key) in (16, 24, 32)


@pytest.mark.parametrize("raw", ["abc", HEX16[:30], "g" * 20, bytes(20), HEX16 + "0"])
def test_parse_key_bad(raw):
    with pytest.raises(UsageError) as err:
        parse_key(raw, "key file k.bin")
    text = str(err.value)
    assert text.startswith("key file k.bin does not hold a valid AES-GCM key")
    assert "\n" not in text
    shown = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    assert len(shown) < 5 or shown not in text   # the key itself is never printed


def test_key_from_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(UsageError, match=f"environment variable {ENV_VAR} is not set"):
        key_from_env()
    assert key_from_env(required=False) is None
    monkeypatch.setenv(ENV_VAR, "")
    assert key_from_env(required=False) is None
    monkeypatch.setenv("MY_KEY", HEX16)
    assert key_from_env("MY_KEY") == bytes.fromhex(HEX16)
    assert resolve_key(key_env="MY_KEY") == bytes.fromhex(HEX16)
    monkeypatch.setenv("MY_KEY", "short")
    with pytest.raises(UsageError, match="environment variable MY_KEY does not hold"):
        key_from_env("MY_KEY")


def test_key_from_file(tmp_path):
    (tmp_path / "k.hex").write_text(HEX16 + "\n")
    assert key_from_file(tmp_path / "k.hex") == bytes.fromhex(HEX16)
    (tmp_path / "k.bin").write_bytes(bytes(range(24)))
    assert key_from_file(tmp_path / "k.bin") == bytes(range(24))
    with pytest.raises(UsageError, match="does not exist"):
        key_from_file(tmp_path / "absent")
    with pytest.raises(UsageError, match="only one"):
        resolve_key(str(tmp_path / "k.hex"), "MY_KEY")
    assert resolve_key() is None and coerce_key(None) is None
    assert coerce_key(HEX16) == bytes.fromhex(HEX16)


def test_manifest_path():
    assert str(manifest_path("out/model_fp16.mindir")) == "out/model_fp16.mindir.json"


def test_read_manifest(tmp_path):
    artefact = tmp_path / "m.onnx"
    assert read_manifest(artefact) is None
    manifest_path(artefact).write_text(json.dumps({"format": "ONNX", "precision": "fp16"}))
    with pytest.raises(UsageError, match="field 'io_dtype' is missing"):
        read_manifest(artefact)


@pytest.mark.parametrize("text,needle", [("{not json", "cannot be read"),
                                         ("[1, 2]", "is not a JSON object"),
                                         ('"x"', "is not a JSON object")])
def test_read_manifest_bad(tmp_path, text, needle):
    artefact = tmp_path / "m.mindir"
    manifest_path(artefact).write_text(text)
    with pytest.raises(UsageError) as err:
        read_manifest(artefact)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert "m.mindir.json" in str(err.value)


def test_summarize_params():
    summary = summarize_params({"a": ("float16", (2, 3)), "b": ("float32", [4]),
                                "c": ("float16", ())})
    assert summary == {"count": 11, "bytes": 6 * 2 + 4 * 4 + 2, "tensors": 3,
                       "dtypes": {"float16": 7, "float32": 4}}
    assert summarize_params({}) == {"count": 0, "bytes": 0, "tensors": 0, "dtypes": {}}


def test_artefact_format_by_suffix():
    assert artefact_format("a/model.mindir") == "MINDIR"
    assert artefact_format("MODEL.ONNX") == "ONNX"
    assert artefact_format("m.air") == "AIR"
    with pytest.raises(UsageError) as err:
        artefact_format("model.pb")
    assert "unknown artefact type '.pb'" in str(err.value)
    with pytest.raises(UsageError, match="unknown artefact type ''"):
        artefact_format("model")


def test_infer_precision():
    assert infer_precision({"weights": {"a": ("float16", (2,)), "b": ("float32", (2,))}}) == "fp16"
    assert infer_precision({"weights": {"a": ("float32", (2,))}}) == "fp32"
    assert infer_precision({"weights": {}}) is None


def _mindir(path, params: dict, graph_fields: int = 1) -> None:
    """A MindIR message with one input and output and ``params`` (name -> float32 array, or
    (dims, raw bytes) for a parameter whose bytes do not fit its shape), its graph written
    as ``graph_fields`` consecutive fields (a parser merges them, as a file streamed a
    parameter at a time is read)."""
    import numpy as np
    from mindspore.train import mind_ir_pb2

    head = mind_ir_pb2.ModelProto()
    head.producer_name = "test"
    head.graph.input.add().name = "x"
    head.graph.output.add().name = "y"
    head.graph.node.add().op_type = "MatMul"
    pieces = [head.SerializeToString()]
    items = list(params.items())
    per = -(-len(items) // graph_fields)
    for start in range(0, len(items), per):
        piece = mind_ir_pb2.ModelProto()
        for name, value in items[start:start + per]:
            dims, raw = (value.shape, value.tobytes()) if isinstance(value, np.ndarray) \
                else value
            param = piece.graph.parameter.add()
            param.name, param.data_type, param.raw_data = f"g:{name}", 1, raw  # 1: FLOAT32
            param.dims.extend(dims)
        pieces.append(piece.SerializeToString())
    path.write_bytes(b"".join(pieces))


@pytest.mark.parametrize("graph_fields", [1, 3])
def test_mindir_weights_are_read_a_parameter_at_a_time_as_a_parser_reads_them(
        tmp_path, graph_fields):
    import numpy as np
    from mindspore.train import mind_ir_pb2

    from amptool.artefact.mindir import describe, read_weights

    rng = np.random.default_rng(0)
    params = {f"w{i}": rng.standard_normal((3, i + 2)).astype(np.float32) for i in range(5)}
    path = tmp_path / "m.mindir"
    _mindir(path, params, graph_fields)
    parsed = mind_ir_pb2.ModelProto()
    parsed.ParseFromString(path.read_bytes())
    assert [p.name for p in parsed.graph.parameter] == [f"g:{n}" for n in params]
    weights = read_weights(path)
    assert list(weights) == list(params)
    assert all(np.array_equal(weights[n], params[n]) and weights[n].dtype == np.float32
               for n in params)
    facts = describe(path)
    assert facts["weights"] == {n: ("float32", list(v.shape)) for n, v in params.items()}
    assert facts["producer"] == "test"


def test_describe_reads_no_weight_bytes_and_read_weights_names_a_bad_one(tmp_path):
    """A parameter whose bytes do not fit its shape: ``describe`` (which reads names,
    dtypes and shapes) never sees them; ``read_weights`` names it."""
    import numpy as np

    from amptool.artefact.mindir import describe, read_weights

    path = tmp_path / "m.mindir"
    _mindir(path, {"ok": np.ones((2, 2), np.float32), "bad": ((4, 4), b"\0" * 12)})
    assert describe(path)["weights"] == {"ok": ("float32", [2, 2]), "bad": ("float32", [4, 4])}
    with pytest.raises(UsageError, match="is corrupt: parameter bad holds 12 bytes"):
        read_weights(path)


@pytest.mark.parametrize("cut", [1, 40, -3])
def test_a_cut_mindir_is_refused_in_one_error(tmp_path, cut):
    import numpy as np

    from amptool.artefact.mindir import describe, read_weights

    path = tmp_path / "m.mindir"
    _mindir(path, {"w": np.ones((8, 8), np.float32)})
    path.write_bytes(path.read_bytes()[:cut])
    for read in (describe, read_weights):
        with pytest.raises(UsageError, match="cannot be read as MindIR"):
            read(path)
