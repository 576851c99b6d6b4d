"""report.html: one self-contained page a person reads offline.

Owns the page's parts (``page``), inline SVG charts (``svgchart``), the report of
``amptool train``, ``parity`` and ``run`` (``html``) with its training, per-layer and
artefact parts (``training``, ``layers``, ``artefacts``), the diff page of ``amptool diff``
(``diff``), and the optional matplotlib charts of ``--plot`` (``plotting``). May import
``amptool.artefact``, ``amptool.precision``, ``amptool.documents`` and the packages below
them; never MindSpore at module level.
"""
