"""Kernel I/O, all of it: the one package that talks to nf_tables, conntrack and the links.

libnftables and lbweb's own netlink batches (``applier``, ``sandbox``, ``scratch``, ``transcribe``,
``nfmsg``, ``netlink``, ``steps``), reading the table back (``drift``), conntrack (``conntrack``),
interfaces and neighbours (``links``) and the collector's readings (``collectors``). The pure compiler
is ``compiler/``. The web process imports nothing from here: the contracts in pyproject.toml and
``tests/repo/test_import_contracts.py`` fail on such an import.
"""
