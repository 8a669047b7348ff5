"""The worker's side of remote syslog: rsyslog's configuration written and checked (applier), its supervisor (run)."""
