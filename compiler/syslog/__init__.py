"""The rsyslog configuration generator (remote syslog): ``SyslogSpec`` in, one ``rsyslog.conf`` out. Pure."""
