"""MindSpore's process: the import, the device, signals and msrun jobs.

Owns ``import_mindspore`` and the device and execution mode (``device``), Ctrl+C and SIGTERM
kept Python's (``interrupts``), and jobs of processes started by msrun with their watch
(``msjob``, ``jobwatch``). May import ``amptool.files`` and ``amptool.errors``.
"""
