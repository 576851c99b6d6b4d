"""Every data source loads real files through MindSpore's readers and fits the model's input."""
import struct

import numpy as np
import pytest

from amptool.data import epoch_batches, load_dataset, load_eval_split, split_indices
from amptool.device import set_device
from amptool.errors import UsageError


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
    x, y = load_eval_split("digits", data.preprocess.to_dict(), 10)
    np.testing.assert_array_equal(x, data.val_x)
    np.testing.assert_array_equal(y, data.val_y)
    x5, _ = load_eval_split("digits", data.preprocess.to_dict(), 10, samples=5)
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
