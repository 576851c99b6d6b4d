"""The release gate across time: parity reports compared (``amptool diff``), the ledger of
every check (``amptool ledger``), and the deploy-time check that the bytes shipped passed
(``amptool verify``). Imports the core only, never another stage.
"""
