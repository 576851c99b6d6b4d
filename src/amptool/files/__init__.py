"""File safety: what amptool writes lands whole or not at all.

Owns atomic writes and staging folders (``fileio``, ``staging``), output folders held by one
writer, line logs, digests and free space; config files (YAML, TOML, JSON) loaded into frozen
dataclasses (``configfile``); and the protobuf wire format for files read a field at a time
(``protowire``). Imports only ``amptool.errors`` and the standard library.
"""
