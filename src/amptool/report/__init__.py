"""report.html: one self-contained page a person reads offline.

Owns the page's parts (``page``), inline SVG charts (``svgchart``), the report for parity and
``amptool run`` (``html``) and its training part (``training``), and the optional matplotlib
charts of ``--plot`` (``plotting``). May import ``amptool.artefact``, ``amptool.precision``,
``amptool.documents`` and the packages below them; never MindSpore at module level.
"""
