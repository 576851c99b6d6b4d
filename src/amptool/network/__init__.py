"""The network and what it is given: model references, user code, inputs, losses, weights.

Owns model references and factories (``models``), importing the code a user names and whose
code may run (``usercode``, ``trust``), input signatures (``signature``), training losses
and task metrics (``losses``, ``taskmetric``) and checkpoints (``checkpoint``, read a tensor
at a time by ``ckptstream``). May import ``amptool.runtime``, ``amptool.files``,
``amptool.errors`` and the sample networks.
"""
