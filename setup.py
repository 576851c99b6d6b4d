"""Maps the top-level folders onto the single ``amptool`` import namespace."""
from setuptools import find_packages, setup

SUBTREES = ("train", "convert", "export", "parity", "gate", "samples")
subpkgs = find_packages(where=".", include=[f"{t}*" for t in SUBTREES])
# src/amptool/<stage> are links to the stage folders, for tools that walk the package's
# folder (import-linter on an editable install): the stages come from their own folders
core = find_packages(where="src", include=["amptool*"],
                     exclude=[f"amptool.{t}*" for t in SUBTREES])

setup(
    packages=core + [f"amptool.{p}" for p in subpkgs],
    package_dir={"amptool": "src/amptool", **{f"amptool.{t}": t for t in SUBTREES}},
    package_data={"amptool": ["py.typed"],
                  "amptool.samples": ["data/*.npz", "data/*.md", "data/*.py"]},
    include_package_data=False,
)
