"""Maps the top-level folders onto the single ``amptool`` import namespace."""
from setuptools import find_packages, setup

SUBTREES = ("train", "convert", "export", "parity", "samples")
subpkgs = find_packages(where=".", include=[f"{t}*" for t in SUBTREES])
core = find_packages(where="src", include=["amptool*"])

setup(
    packages=core + [f"amptool.{p}" for p in subpkgs],
    package_dir={"amptool": "src/amptool", **{f"amptool.{t}": t for t in SUBTREES}},
    package_data={"amptool.samples": ["data/*.npz", "data/*.md", "data/*.py"]},
    include_package_data=False,
)
