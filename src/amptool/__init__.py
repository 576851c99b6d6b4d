"""amptool: mixed-precision training, FP16 export and parity gates for MindSpore."""

__version__ = "0.1.0"
