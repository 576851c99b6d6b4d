"""Input signatures and model references: parsing, errors, generated inputs (no network
compiled)."""
import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.network.models import parse_model_args
from amptool.network.signature import InputSpec, format_signature, image_signature, parse_signature


def test_text_form_round_trips():
    text = "input_ids:-1x128:int32:0..30522,attention_mask:-1x128:int32:0..2"
    specs = parse_signature(text, "--input-spec")
    assert [s.name for s in specs] == ["input_ids", "attention_mask"]
    assert specs[0] == InputSpec("input_ids", (-1, 128), "int32", 0.0, 30522.0)
    assert format_signature(specs) == text
    assert parse_signature(format_signature(specs), "again") == specs


def test_mappings_shapes_and_image_shorthand():
    specs = parse_signature([{"name": "x", "shape": [None, 3, 8, 8]},
                             {"name": "t", "shape": [-1, 4], "dtype": "int64", "range": [0, 9]}],
                            "input_signature")
    assert specs[0].shape == (-1, 3, 8, 8) and specs[0].dtype == "float32"
    assert specs[1].low == 0 and specs[1].high == 9
    assert parse_signature((1, 28, 28), "input_shape") == image_signature((1, 28, 28))


@pytest.mark.parametrize("text, words", [
    ("x:-1x3:float8", "dtype 'float8'"),
    ("x:-1xA:float32", "bad shape '-1xA'"),
    ("x:-1x0:float32", "dims must be positive or -1"),
    ("x:-1x3", "bad input 'x:-1x3'"),
    ("x:-1x3:int32:5..5", "range 5.0..5.0 of x is empty"),
    ("x:-1x3:int32:5-9", "bad range '5-9'"),
    ("x:-1x3:float32,x:-1x3:float32", "input names repeat"),
    ("2x:-1x3:float32", "not an identifier"),
    ("", "no inputs"),
])
def test_bad_signatures_are_one_line(text, words):
    with pytest.raises(UsageError) as info:
        parse_signature(text, "--input-spec")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_generated_inputs_are_seeded_and_in_range():
    specs = parse_signature("ids:-1x16:int32:3..7,f:-1x4:float32:-2..2,g:-1x-1:float32", "s")
    a = [s.generate(50, np.random.RandomState(1)) for s in specs]
    b = [s.generate(50, np.random.RandomState(1)) for s in specs]
    c = [s.generate(50, np.random.RandomState(2)) for s in specs]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    assert a[0].dtype == np.int32 and a[0].min() >= 3 and a[0].max() <= 6 and a[0].shape == (50, 16)
    assert set(np.unique(a[0])) == {3, 4, 5, 6}
    assert a[1].min() >= -2 and a[1].max() <= 2
    assert a[2].shape == (50, 8)  # a dynamic length is filled with a fixed size
    assert specs[0].example(2).tolist() == [[3] * 16] * 2


def test_model_args_parse_values():
    assert parse_model_args(["model_name=resnet18", "num_classes=10", "drop_rate=0.1",
                             "pretrained=false", "x=None"]) == {
        "model_name": "resnet18", "num_classes": 10, "drop_rate": 0.1, "pretrained": False,
        "x": None}
    for bad in ("num_classes", "=3", "2x=1"):
        with pytest.raises(UsageError, match="bad --model-arg"):
            parse_model_args([bad])
