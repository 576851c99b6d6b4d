"""Every data source loads real files through MindSpore's readers and fits the model's input."""
import dataclasses
import struct
from pathlib import Path

import numpy as np
import pytest
from smalldata import load_dataset, load_eval_split, load_raw

from amptool.data.dataset import epoch_batches, split_indices
from amptool.errors import UsageError
from amptool.runtime.device import set_device


@pytest.fixture(scope="module", autouse=True)
def cpu():
    set_device("CPU")


def _write_idx(folder, prefix, images, labels):
    n, h, w = images.shape
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 2051, n, h, w) + images.astype(np.uint8).tobytes())
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 2049, n) + labels.astype(np.uint8).tobytes())


def test_mnist_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    _write_idx(tmp_path, "train", rng.integers(0, 256, (30, 28, 28)), np.arange(30) % 10)
    _write_idx(tmp_path, "t10k", rng.integers(0, 256, (10, 28, 28)), np.arange(10) % 10)
    data = load_dataset(f"mnist:{tmp_path}", (1, 28, 28), 10, 0.2)
    assert data.train_x.shape == (32, 1, 28, 28) and data.val_x.shape == (8, 1, 28, 28)
    assert sorted(np.concatenate([data.train_y, data.val_y]).tolist()) == sorted(
        (list(range(10)) * 4))
    assert abs(float(data.train_x.mean())) < 1e-4


def test_mnist_folder_without_idx_files(tmp_path):
    with pytest.raises(UsageError, match="MNIST"):
        load_dataset(f"mnist:{tmp_path}", (1, 28, 28), 10)


def test_imagefolder_resizes_and_converts_channels(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(5):
            arr = rng.integers(0, 256, (40 + i, 30, 3), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / cls / f"{i}.png")
    data = load_dataset(f"imagefolder:{tmp_path}", (1, 16, 16), 2, 0.2)
    assert data.train_x.shape == (8, 1, 16, 16)
    assert set(data.train_y.tolist()) | set(data.val_y.tolist()) == {0, 1}
    rgb = load_dataset(f"imagefolder:{tmp_path}", (3, 20, 20), 2, 0.2)
    assert rgb.train_x.shape == (8, 3, 20, 20)


def test_npz_and_synthetic(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.random.randint(0, 256, (50, 8, 8)).astype(np.uint8), y=np.arange(50) % 10)
    data = load_dataset(f"npz:{path}", (1, 28, 28), 10)
    assert data.train_x.shape == (40, 1, 28, 28) and data.train_x.dtype == np.float32
    syn = load_dataset("synthetic", (1, 28, 28), 10)
    assert syn.train_x.shape[1:] == (1, 28, 28) and len(set(syn.train_y.tolist())) > 5
    no_y = tmp_path / "noy.npz"
    np.savez(no_y, x=np.zeros((4, 8, 8)))
    with pytest.raises(UsageError, match="lacks array"):
        load_dataset(f"npz:{no_y}", (1, 8, 8), 10)


def test_eval_split_matches_training_split():
    data = load_dataset("digits", (1, 28, 28), 10)
    x, y = load_eval_split("digits", dataclasses.asdict(data.preprocess), 10)
    np.testing.assert_array_equal(x, data.val_x)
    np.testing.assert_array_equal(y, data.val_y)
    x5, _ = load_eval_split("digits", dataclasses.asdict(data.preprocess), 10, samples=5)
    np.testing.assert_array_equal(x5, data.val_x[:5])


def test_split_is_fixed_and_batches_follow_seed_and_epoch():
    a_train, a_val = split_indices(100, 0.2)
    b_train, b_val = split_indices(100, 0.2)
    assert np.array_equal(a_val, b_val) and not set(a_train) & set(a_val)
    first = [b.tolist() for b in epoch_batches(100, 10, seed=1, epoch=0)]
    assert first == [b.tolist() for b in epoch_batches(100, 10, seed=1, epoch=0)]
    assert first != [b.tolist() for b in epoch_batches(100, 10, seed=1, epoch=1)]
    shards = [list(epoch_batches(100, 10, 1, 0, (r, 2))) for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 5
    assert not set(np.concatenate(shards[0])) & set(np.concatenate(shards[1]))
    with pytest.raises(UsageError, match="exceeds"):
        list(epoch_batches(10, 32, 0, 0))


def _folder(root, per_class=6, size=(12, 10)):
    from PIL import Image

    rng = np.random.default_rng(1)
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(
                root / cls / f"{i}.png")
    return root


def _model(shape, classes=2):
    from types import SimpleNamespace

    return SimpleNamespace(input_shape=shape, num_classes=classes, inputs=())


def test_image_files_are_decoded_in_the_pipeline_as_requested(tmp_path):
    """Streamed batches (any number of workers) equal the images read one by one."""
    from PIL import Image

    from amptool.data.dataset import load_model_data

    root = _folder(tmp_path / "imgs")
    data = load_model_data(f"imagefolder:{root}", _model((3, 12, 10)), 0.25, workers=2)
    assert len(data.train_idx) == 9 and len(data.val_idx) == 3 and data.skipped == []
    order = [np.array([3, 0, 8]), np.array([5, 1, 2])]
    streamed = list(data.train_batches(order))
    again = list(load_model_data(f"imagefolder:{root}", _model((3, 12, 10)), 0.25,
                                 workers=1).train_batches(order))
    prep = data.preprocess
    for (inputs, y), (inputs1, y1), positions in zip(streamed, again, order):
        np.testing.assert_array_equal(inputs[0], inputs1[0])
        np.testing.assert_array_equal(y, y1)
        for row, pos in zip(inputs[0], positions):
            path = data.rows.paths[data.train_idx[pos]]
            raw = np.asarray(Image.open(path), np.float32).transpose(2, 0, 1) / 255.0
            want = (raw - prep.mean) / prep.std  # bounded relative to the values' scale
            np.testing.assert_allclose(row, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))
    assert [len(y) for _, y in data.val_batches()] == [3]


def test_unreadable_images_are_skipped_and_named(tmp_path):
    from amptool.data.dataset import load_model_data
    from amptool.data.sources import skipped_note

    root = _folder(tmp_path / "imgs")
    (root / "a" / "9.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)  # header only
    (root / "b" / "9.jpg").write_bytes(np.random.default_rng(0).bytes(300))
    (root / "b" / "notes.txt").write_text("not an image, not counted\n")
    data = load_model_data(f"imagefolder:{root}", _model((1, 8, 8)), 0.25)
    assert sorted(Path(p).name for p in data.skipped) == ["9.jpg", "9.png"]
    assert len(data.labels) == 12
    note = skipped_note(data.skipped, 14)
    assert note.startswith("skipped 2 of 14 image files") and "9.png" in note
    batches = list(data.train_batches([np.arange(9)]))
    assert batches[0][0][0].shape == (9, 1, 8, 8) and np.isfinite(batches[0][0][0]).all()


@pytest.mark.parametrize("layout", ["flat", "empty classes", "none readable", "missing"])
def test_image_folder_mistakes(tmp_path, layout):
    from amptool.data.dataset import load_model_data

    root = tmp_path / "imgs"
    if layout == "flat":
        _folder(root)
        for png in root.glob("*/*.png"):
            png.rename(root / f"{png.parent.name}{png.name}")
        for sub in ("a", "b"):
            (root / sub).rmdir()
        words = "no class sub-folders"
    elif layout == "empty classes":
        (root / "a").mkdir(parents=True)
        (root / "a" / "x.txt").write_text("x")
        words = "no images in the class sub-folders"
    elif layout == "none readable":
        (root / "a").mkdir(parents=True)
        (root / "a" / "x.png").write_bytes(b"not an image at all")
        words = "none of the 1 files in .* is a readable image"
    else:
        words = "does not exist"
    with pytest.raises(UsageError, match=words):
        load_model_data(f"imagefolder:{root}", _model((1, 8, 8)), 0.25)


def test_npz_stored_uncompressed_is_memory_mapped(tmp_path):
    from amptool.data.dataset import load_model_data
    from amptool.data.sources import npz_arrays

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (60, 8, 8)).astype(np.uint8), np.arange(60) % 10
    np.savez(tmp_path / "plain.npz", x=x, y=y)
    np.savez_compressed(tmp_path / "packed.npz", x=x, y=y)
    assert isinstance(npz_arrays(str(tmp_path / "plain.npz"))["x"], np.memmap)
    assert not isinstance(npz_arrays(str(tmp_path / "packed.npz"))["x"], np.memmap)
    np.testing.assert_array_equal(npz_arrays(str(tmp_path / "plain.npz"))["x"], x)
    order = [np.array([4, 7, 1, 0]), np.array([9, 2, 3, 5])]
    got = [list(load_model_data(f"npz:{tmp_path / name}", _model((1, 8, 8), 10),
                                workers=2).train_batches(order)) for name in ("plain.npz",
                                                                              "packed.npz")]
    for (a, ya), (b, yb) in zip(*got):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(ya, yb)
    np.savez(tmp_path / "uneven.npz", x=x, y=y[:50])
    with pytest.raises(UsageError, match="60 images but 50 labels"):
        load_model_data(f"npz:{tmp_path / 'uneven.npz'}", _model((1, 8, 8), 10))


def test_statistics_come_from_a_bounded_sample(monkeypatch):
    from amptool.data import dataset as data_mod

    full = data_mod.load_model_data("digits", _model((1, 28, 28), 10))
    monkeypatch.setattr(data_mod, "STATS_SAMPLES", 100)
    part = data_mod.load_model_data("digits", _model((1, 28, 28), 10))
    x = load_raw("digits", (1, 28, 28), 10)[0]
    np.testing.assert_allclose(full.preprocess.mean, x[full.train_idx].mean(), rtol=1e-5)
    np.testing.assert_allclose(full.preprocess.std, x[full.train_idx].std(), rtol=1e-5)
    np.testing.assert_allclose(part.preprocess.mean, x[part.train_idx[:100]].mean(), rtol=1e-5)
    assert part.preprocess.mean != full.preprocess.mean


def test_data_workers_are_checked():
    from amptool.data.feed import check_workers, default_workers

    assert check_workers(None) == default_workers() >= 1
    assert check_workers(10_000) >= 1
    with pytest.raises(UsageError, match="--data-workers must be >= 1"):
        check_workers(0)


def _train_on_folder(root, out, epochs: int):
    from typer.testing import CliRunner

    from amptool.cli import app

    return CliRunner().invoke(app, ["train", "--data", f"imagefolder:{root}", "--epochs",
                                    str(epochs), "--batch-size", "4", "--data-workers", "2",
                                    "--out", str(out), "-q"])


@pytest.mark.slow
def test_training_on_an_image_folder_warns_once_about_a_broken_file(tmp_path):
    import json

    root = _folder(tmp_path / "imgs", per_class=10)
    (root / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\1" * 64)
    out = tmp_path / "run"
    result = _train_on_folder(root, out, epochs=1)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("amptool: warning")]
    assert len(warnings) == 1 and "skipped 1 of 21 image files" in warnings[0]
    assert "broken.png" in warnings[0]
    run = json.loads((out / "run.json").read_text())
    assert run["data"]["skipped_files"] == 1 and run["data"]["train_samples"] == 16


def test_a_bad_value_found_by_a_pipeline_worker_is_one_usage_error(tmp_path):
    from amptool.data.dataset import load_model_data

    x = np.random.default_rng(0).random((40, 8, 8)).astype(np.float32)
    x[37, 2, 2] = np.nan  # not the row checked up front: the statistics pass meets it
    np.savez(tmp_path / "nan.npz", x=x, y=np.arange(40) % 10)
    with pytest.raises(UsageError, match="NaN/Inf values in the images"):
        load_model_data(f"npz:{tmp_path / 'nan.npz'}", _model((1, 8, 8), 10), workers=2)


@pytest.mark.parametrize("source", ["imagefolder",  # the bundled digits: 450 batches an epoch
                                    pytest.param("digits", marks=pytest.mark.slow)])
def test_one_stream_over_the_epochs_gives_each_epochs_batches(tmp_path, source):
    """A run reads through one pipeline across epochs: epoch by epoch it gives exactly the
    batches a pipeline of that epoch alone gives, in order."""
    from amptool.data.dataset import epoch_batches, load_model_data

    spec = f"imagefolder:{_folder(tmp_path / 'imgs')}" if source == "imagefolder" else "digits"
    model = _model((3, 12, 10)) if source == "imagefolder" else _model((1, 28, 28), 10)
    data = load_model_data(spec, model, 0.25, workers=2)

    def order_of(epoch):
        return list(epoch_batches(len(data.train_idx), 3, 7, epoch))

    stream = data.train_stream(order_of, 1, 3)
    for epoch in (1, 2):
        alone = list(data.train_batches(order_of(epoch)))
        streamed = list(stream.epoch(epoch))
        assert len(streamed) == len(alone) == len(data.train_idx) // 3
        for (a, ya), (b, yb) in zip(streamed, alone):
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(ya, yb)
    with pytest.raises(ValueError, match="at epoch 3, not 1"):
        next(stream.epoch(1))


def _undecodable_png(path):
    """Rewrite the PNG at ``path`` with its compressed pixels scrambled and the chunk's
    checksum recomputed: PIL's header and checksum test passes, decoding fails."""
    import zlib

    from PIL import Image

    data, pos = bytearray(path.read_bytes()), 8
    while data[pos + 4:pos + 8] != b"IDAT":
        pos += 12 + struct.unpack(">I", data[pos:pos + 4])[0]
    size = struct.unpack(">I", data[pos:pos + 4])[0]
    data[pos + 10:pos + 8 + size] = bytes(b ^ 0x5A for b in data[pos + 10:pos + 8 + size])
    data[pos + 8 + size:pos + 12 + size] = struct.pack(
        ">I", zlib.crc32(bytes(data[pos + 4:pos + 8 + size])))
    path.write_bytes(bytes(data))
    with Image.open(path) as image:
        image.verify()


@pytest.mark.slow
@pytest.mark.parametrize("stats_samples, per_class, name", [(10_000, 10, "5.png"),
                                                             (4, 60, "59.png")])
def test_an_image_that_passes_the_check_but_does_not_decode_is_named(tmp_path, monkeypatch,
                                                                    stats_samples, per_class,
                                                                    name):
    """Found by the statistics pass (the folder within its sample) or by the training
    stream (past it, after steps were trained on the files before it, and past the 16
    batches after the last one delivered): one usage error naming the file, and no output
    folder left."""
    from amptool.data import dataset as data_mod

    monkeypatch.setattr(data_mod, "STATS_SAMPLES", stats_samples)
    root = _folder(tmp_path / "imgs", per_class=per_class)
    bad = root / "b" / name
    _undecodable_png(bad)
    out = tmp_path / "run"
    result = _train_on_folder(root, out, epochs=2)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("amptool:")]
    assert len(lines) == 1 and lines[0].startswith(f"amptool: error: image {bad} cannot be "
                                                   "decoded"), result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))


def test_augment_crops_and_flips_each_image_by_seed_epoch_and_row():
    from amptool.data.dataset import Augment, parse_augment

    x = np.random.default_rng(0).random((6, 2, 16, 8)).astype(np.float32)
    rows = np.array([5, 9, 2, 7, 11, 3])
    both = Augment(parse_augment("crop, flip"), seed=3)
    out = both(x, rows, epoch=1)
    np.testing.assert_array_equal(out, both(x, rows, epoch=1))  # fixed draws
    # a row's draws do not depend on the batch it is in
    np.testing.assert_array_equal(out[2:4], both(x[2:4], rows[2:4], epoch=1))
    assert not np.array_equal(out, both(x, rows, epoch=2))
    flip = Augment(("flip",), seed=3)(x, rows, epoch=1)
    mirrored = [np.array_equal(f, i[..., ::-1]) for f, i in zip(flip, x)]
    assert all(m or np.array_equal(f, i) for m, f, i in zip(mirrored, flip, x)) and any(mirrored) \
        and not all(mirrored)
    crop = Augment(("crop",), seed=3)(x, rows, epoch=1)
    for c, i in zip(crop, x):  # a window of the image padded by 2 rows and 1 column of zeros
        padded = np.pad(i, ((0, 0), (2, 2), (1, 1)))
        assert any(np.array_equal(c, padded[:, dy:dy + 16, dx:dx + 8])
                   for dy in range(5) for dx in range(3))
    assert not np.array_equal(crop, x)
    with pytest.raises(UsageError, match="unknown augmentation blur"):
        parse_augment("crop,blur")
    assert parse_augment(None) == parse_augment("") == parse_augment([]) == ()
    assert parse_augment(["flip", "crop"]) == ("flip", "crop")  # a config file's list
    with pytest.raises(UsageError, match="augment must be a comma-separated text or a list"):
        parse_augment(True)


@pytest.mark.parametrize("source", ["imagefolder",  # the bundled digits: 450 batches an epoch
                                    pytest.param("digits", marks=pytest.mark.slow)])
def test_augmented_streams_resume_exactly(tmp_path, source):
    """A stream started at epoch 1 (a resumed run) gives the augmented batches the stream
    from epoch 0 gives there: the unaugmented stream's rows, each changed as ``Augment``
    says before standardization."""
    from amptool.data.dataset import Augment, epoch_batches, load_model_data

    spec = f"imagefolder:{_folder(tmp_path / 'imgs')}" if source == "imagefolder" else "digits"
    model = _model((3, 12, 10)) if source == "imagefolder" else _model((1, 28, 28), 10)
    data = load_model_data(spec, model, 0.25, workers=2)
    augment = Augment(("crop", "flip"), seed=7)

    def order_of(epoch):
        return list(epoch_batches(len(data.train_idx), 3, 7, epoch))

    whole = data.train_stream(order_of, 0, 2, augment)
    assert len(list(whole.epoch(0))) == len(order_of(0))
    plain = list(data.train_stream(order_of, 1, 2).epoch(1))
    resumed = list(data.train_stream(order_of, 1, 2, augment).epoch(1))
    for (a, ya), (b, yb), (p, yp) in zip(whole.epoch(1), resumed, plain):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(yb, yp)
    whole.close()
    assert not np.array_equal(resumed[0][0][0], plain[0][0][0])
    # the same rows as the unaugmented stream, each image changed as Augment says
    idx = data.train_idx[order_of(1)[0]]
    expected = augment(data.fit.__class__(data.fit.shape, data.source)(data.rows.take(idx))[0],
                       idx, 1)
    prep = data.preprocess
    np.testing.assert_allclose(resumed[0][0][0], (expected - prep.mean) / prep.std, rtol=1e-5,
                               atol=1e-5 * max(1.0, 1 / prep.std))
    # read back alone, as forensics replay a step's batch: the same augmented inputs
    np.testing.assert_array_equal(data.train_inputs(order_of(1)[0], augment, 1)[0],
                                  resumed[0][0][0])
    np.testing.assert_array_equal(data.train_inputs(order_of(1)[0])[0], plain[0][0][0])


@pytest.mark.slow
def test_a_run_leaves_no_pipeline_workers_behind(tmp_path, monkeypatch, few_digits):
    """The training stream reads ahead past the last step: the run stops it, so calling
    ``amptool.train`` again and again does not pile up the pipeline's worker threads; and
    it releases its compiled graphs, also when it stops on a mistake."""
    import threading
    import time

    import mindspore

    import amptool
    from amptool import TrainConfig
    from amptool.errors import UsageError

    recycled, real = [], mindspore.ms_memory_recycle
    monkeypatch.setattr(mindspore, "ms_memory_recycle", lambda: recycled.append(real()))

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("GeneratorWorker")]

    def settled(most: int) -> int:  # MindSpore joins a stopped pipeline's workers
        for _ in range(50):
            if len(workers()) <= most:
                break
            time.sleep(0.1)
        return len(workers())

    before = settled(0)
    for i in range(2):
        amptool.train(TrainConfig(epochs=1, data_workers=2, data=few_digits,
                                  out=str(tmp_path / f"run{i}")))
        assert settled(before) <= before
    assert len(recycled) == 2
    np.savez(tmp_path / "unlabelled.npz", z=np.zeros((4, 3), np.float32))  # found once built
    with pytest.raises(UsageError, match="unlabelled.npz"):
        amptool.train(TrainConfig(data=f"npz:{tmp_path / 'unlabelled.npz'}",
                                  out=str(tmp_path / "r")))
    assert len(recycled) == 3
