"""Statistics and the verdict: the figures parity computes, the limits they are held to.

Owns the metrics between a reference and a candidate output (``metrics``), their streaming
and mergeable forms (``stream``, ``top1``, ``sketch``, ``exactsum``), what a sample count
resolves (``counts``), the limits (``limits``), the one rule that judges an output
(``judge``) and what a figure's change between two reports must exceed to count
(``regression``). Imports numpy, ``amptool.errors`` and the standard library only: no MindSpore.
"""
