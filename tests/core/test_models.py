"""Model references: sample names and ``file.py:factory`` with one clear error each way."""
import pytest

from amptool.errors import UsageError
from amptool.models import model_names, resolve_model

HEADER = "from mindspore import nn\n\n"
SOURCES = {
    "good.py": HEADER + (
        "def build():\n"
        "    net = nn.Dense(4, 3)\n"
        "    net.input_shape = (1, 2, 2)\n"
        "    net.num_classes = 3\n"
        "    return net\n\n"
        "def bare():\n"
        "    return nn.Dense(4, 3)\n\n"
        "def on_factory():\n"
        "    return nn.Dense(12, 5)\n\n"
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
    assert spec.summary == f"user model build from {folder}/good.py"
    from mindspore import nn

    net = spec.build()
    assert isinstance(net, nn.Dense) and tuple(net.weight.shape) == (3, 4)


def test_user_model_attributes_on_factory(folder):
    spec = resolve_model(f"{folder}/good.py:on_factory")
    assert spec.input_shape == (3, 2, 2) and spec.num_classes == 5


def test_sample_name():
    assert "lenet5" in model_names()
    spec = resolve_model("lenet5")
    assert spec.name == "lenet5" and len(spec.input_shape) == 3 and spec.num_classes >= 2


def test_unknown_name():
    text = _error("resnet9000")
    assert "unknown model 'resnet9000'" in text and "lenet5" in text
    assert "unknown model" in _error("model.txt:build")


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
    ("bare", "does not declare input_shape (C, H, W) and num_classes"),
    ("wrong_shape", "does not declare input_shape"),
    ("one_class", "does not declare input_shape"),
])
def test_bad_factories(folder, factory, needle):
    assert needle in _error(f"{folder}/good.py:{factory}")


def test_path_with_colon(tmp_path):
    folder = tmp_path / "run:v2"
    folder.mkdir()
    (folder / "good.py").write_text(SOURCES["good.py"])
    assert resolve_model(f"{folder}/good.py:build").num_classes == 3
