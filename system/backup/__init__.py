"""The backup that restores the whole appliance: ``archive.py`` seals a document with a passphrase,
``sections.py`` is the registry of every app's part, ``services.py`` makes, restores and schedules backups."""
