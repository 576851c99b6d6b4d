"""Writes digits.npz from the UCI handwritten digits that scikit-learn ships.

Run once by hand (needs scikit-learn); the result is committed and packaged:
    python samples/data/make_digits.py
"""
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits


def main() -> None:
    digits = load_digits()
    x = digits.images.astype(np.uint8)  # (1797, 8, 8), values 0..16
    y = digits.target.astype(np.int32)
    out = Path(__file__).with_name("digits.npz")
    np.savez_compressed(out, x=x, y=y)
    print(f"wrote {out}: x {x.shape} {x.dtype}, y {y.shape}")


if __name__ == "__main__":
    main()
