"""What every command shares: common options, one-line errors with their exit codes, JSON
output (``options``), the threshold flags of the commands that judge parity
(``limitoptions``) and what this host can do (``hostinfo``, ``amptool info``).

The stages' command modules import it; it may import any core package below it, never a
stage. Importing it stays light: no numpy, no MindSpore.
"""
