"""Model references: sample names and ``file.py:factory`` with one clear error each way."""
import pytest

from amptool.errors import UsageError
from amptool.network.models import model_names, resolve_model

HEADER = "from mindspore import nn\n\n"
SOURCES = {
    "good.py": HEADER + (
        "def build():\n"
        "    net = nn.SequentialCell([nn.Flatten(), nn.Dense(4, 3)])\n"
        "    net.input_shape = (1, 2, 2)\n"
        "    net.num_classes = 3\n"
        "    return net\n\n"
        "def bare():\n"
        "    return nn.Dense(4, 3)\n\n"
        "def on_factory():\n"
        "    return nn.SequentialCell([nn.Flatten(), nn.Dense(12, 5)])\n\n"
        "def misfit():\n"
        "    return nn.SequentialCell([nn.Flatten(), nn.Dense(100, 10)])\n\n"
        "misfit.input_shape = (1, 28, 28)\n"
        "misfit.num_classes = 10\n\n"
        "def wrong_width():\n"
        "    return nn.SequentialCell([nn.Flatten(), nn.Dense(4, 7)])\n\n"
        "wrong_width.input_shape = (1, 2, 2)\n"
        "wrong_width.num_classes = 3\n\n"
        "on_factory.input_shape = [3, 2, 2]\n"
        "on_factory.num_classes = 5\n\n"
        "def wrong_shape():\n"
        "    net = nn.Dense(4, 3)\n"
        "    net.input_shape = (4,)\n"
        "    net.num_classes = 3\n"
        "    return net\n\n"
        "def one_class():\n"
        "    net = nn.Dense(4, 1)\n"
        "    net.input_shape = (1, 2, 2)\n"
        "    net.num_classes = 1\n"
        "    return net\n\n"
        "def number():\n"
        "    return 42\n\n"
        "def raises():\n"
        "    raise RuntimeError('no weights here')\n\n"
        "NOT_CALLABLE = 3\n"),
    "broken.py": "import amptool_no_such_module_xyz\n",
    "syntax.py": "def build(:\n",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_models")
    for name, text in SOURCES.items():
        (root / name).write_text(text)
    return root


def _error(ref: str) -> str:
    with pytest.raises(UsageError) as err:
        resolve_model(ref)
    text = str(err.value)
    assert "\n" not in text
    return text


def test_user_model_on_cell(folder):
    spec = resolve_model(f"{folder}/good.py:build")
    assert spec.input_shape == (1, 2, 2) and spec.num_classes == 3
    assert spec.summary == f"{folder}/good.py:build"
    from mindspore import nn

    net = spec.build()
    assert isinstance(net, nn.SequentialCell) and tuple(net[1].weight.shape) == (3, 4)


def test_a_model_that_does_not_fit_its_declared_input_names_the_layer(folder):
    text = _error(f"{folder}/good.py:misfit")
    assert text.startswith(f"model {folder}/good.py:misfit does not fit its inputs "
                           "x:-1x1x28x28:float32: layer 1 (Dense) fails: ")
    assert "784" in text and "100" in text and "fix that layer" in text


def test_declared_class_count_must_match_the_head(folder):
    text = _error(f"{folder}/good.py:wrong_width")
    assert "declares num_classes 3 but its first output has 7 columns" in text


def test_user_model_attributes_on_factory(folder):
    spec = resolve_model(f"{folder}/good.py:on_factory")
    assert spec.input_shape == (3, 2, 2) and spec.num_classes == 5


def test_sample_name():
    from amptool.samples.models import SAMPLES

    assert model_names() == sorted(SAMPLES)  # the names known without MindSpore: all of them
    spec = resolve_model("lenet5")
    assert spec.name == "lenet5" and len(spec.input_shape) == 3 and spec.num_classes >= 2


def test_unknown_name():
    text = _error("resnet9000")
    assert "unknown model 'resnet9000'" in text and "lenet5" in text
    assert "model module model.txt failed to import" in _error("model.txt:build")


def test_missing_file(tmp_path):
    assert f"model file {tmp_path}/nope.py does not exist" in _error(f"{tmp_path}/nope.py:build")


def test_import_errors(folder):
    text = _error(f"{folder}/broken.py:build")
    assert "failed to import: ModuleNotFoundError" in text and "amptool_no_such_module_xyz" in text
    assert "failed to import: SyntaxError" in _error(f"{folder}/syntax.py:build")


@pytest.mark.parametrize("factory,needle", [
    ("missing", "has no callable 'missing'"),
    ("NOT_CALLABLE", "has no callable 'NOT_CALLABLE'"),
    ("number", "number() returned int, not an nn.Cell"),
    ("raises", "raises() raised RuntimeError: no weights here"),
    ("bare", "declares no input signature"),
    ("wrong_shape", "declares input_shape (4,), not (C, H, W)"),
    ("one_class", "declares num_classes 1"),
])
def test_bad_factories(folder, factory, needle):
    assert needle in _error(f"{folder}/good.py:{factory}")


def test_path_with_colon(tmp_path):
    folder = tmp_path / "run:v2"
    folder.mkdir()
    (folder / "good.py").write_text(SOURCES["good.py"])
    assert resolve_model(f"{folder}/good.py:build").num_classes == 3


# --- references to importable modules, factory arguments, signatures -----------------

def test_package_module_factory_with_args_and_signature():
    spec = resolve_model("amptool.samples.models:TextClassifier", {"num_classes": 3},
                         "tokens:-1x32:int32:0..64")
    assert spec.num_classes == 3  # read from one eager forward pass
    assert spec.inputs[0].dtype == "int32" and spec.input_shape is None
    assert spec.reference() == {"model": "amptool.samples.models:TextClassifier",
                                "model_args": {"num_classes": 3},
                                "input_spec": "tokens:-1x32:int32:0..64"}
    assert resolve_model(spec.reference()).num_classes == 3
    assert spec.build() is not spec.build()


@pytest.mark.parametrize("name, args, spec, words", [
    ("amptool.samples.models:TextClassifier", {"colour": 1}, "t:-1x32:int32:0..64",
     "does not take the model argument(s) colour"),
    ("no_such_package_xyz.models:build", {}, None, "failed to import: ModuleNotFoundError"),
    ("amptool.samples.models:nothing_here", {}, None, "has no callable 'nothing_here'"),
    ("amptool.samples.models:TextClassifier", {"num_classes": 3}, None,
     "declares no input signature"),
    ("amptool.samples.models:TextClassifier", {"num_classes": 3}, "t:-1x32x5:float32",
     "does not fit its inputs t:-1x32x5:float32"),
    ("amptool.samples.models:TextClassifier", {"vocab": -4}, "t:-1x32:int32:0..64",
     "TextClassifier() raised"),
    ("amptool.samples.models:TextClassifier", {"num_classes": 3}, "ids:-1x32:int32:0..64",
     "--input-spec names the inputs of model amptool.samples.models:TextClassifier ids, but "
     "its construct takes tokens; name them tokens, in that order"),
])
def test_bad_references_are_one_line(name, args, spec, words):
    with pytest.raises(UsageError) as info:
        resolve_model(name, args, spec)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_recorded_reference_runs_only_code_the_user_chose(folder, tmp_path, monkeypatch):
    from amptool.network.trust import PACKAGES_ENV, keep_model_file, recorded_reference

    spec = resolve_model(f"{folder}/good.py:build")
    run = tmp_path / "run"
    kept = keep_model_file(spec, run)
    assert kept["file"] == "model/good.py"
    assert (run / kept["file"]).read_bytes() == (folder / "good.py").read_bytes()

    def recorded(model, facts=None):
        return recorded_reference({"model": model}, facts, run / "run.json", run)

    rebuilt = resolve_model(recorded(f"{folder}/good.py:build", kept))
    assert rebuilt.num_classes == 3 and rebuilt.name == f"{(run / kept['file']).resolve()}:build"
    assert resolve_model(recorded("lenet5")).name == "lenet5"  # a sample always

    (run / kept["file"]).write_text((folder / "good.py").read_text() + "\n# edited\n")
    with pytest.raises(UsageError, match=r"does not match the recorded sha256\); pass --model"):
        resolve_model(recorded(f"{folder}/good.py:build", kept))
    with pytest.raises(UsageError, match="holds no copy of it with a recorded sha256"):
        resolve_model(recorded(f"{folder}/good.py:build"))  # a file elsewhere, named only
    outside = dict(kept, file="../../good.py")
    with pytest.raises(UsageError, match="does not run on a file's word"):
        resolve_model(recorded(f"{folder}/good.py:build", outside))

    package_ref = recorded("amptool.samples.models:TextClassifier")
    with pytest.raises(UsageError, match=f"from package amptool, which is not trusted; pass "
                                         f"--model .* or add amptool to {PACKAGES_ENV}"):
        resolve_model(package_ref)
    monkeypatch.setenv(PACKAGES_ENV, "amptool")
    package_ref["input_spec"] = "tokens:-1x32:int32:0..64"
    assert resolve_model(package_ref).inputs[0].name == "tokens"


def test_first_line_skips_mindspore_banners():
    from amptool.errors import first_line

    assert first_line(ValueError("plain message.")) == "plain message."
    assert first_line(ValueError("")) == "ValueError"
    banner = "\n-----\n- Kernel select failed:\n-----\nSelect op fail! Unsupported!\n" \
             "supported: a, b, but get input[Float32] and output[Float32]\n-----\n- C++:\n"
    assert first_line(RuntimeError(banner)) == (
        "Select op fail! Unsupported, got input[Float32] and output[Float32]")
