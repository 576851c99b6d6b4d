"""Sample networks and the bundled handwritten-digits data set."""

NAMES = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp", "textcls", "causallm",
         "detector")
"""The sample networks' names (the keys of ``models.SAMPLES``), known without importing
MindSpore: a mistaken ``--model`` is refused before the framework loads."""
