"""Engine plug-ins for the long fuzz run of issue 39 (``bench/fuzz_engines.py``): one module per engine, each with
``FIELDS`` (name -> hypothesis strategy of the value tried there), ``clean(values) -> errors | None`` (lbweb's
validation) and ``engine_check(values) -> (ok, message)`` (the engine's own verdict on the file lbweb writes from
values ``clean`` accepted). ``bench/fuzz/run.py`` runs them on their own."""
