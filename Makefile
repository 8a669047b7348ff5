.PHONY: run test setup bench

run:    ## fresh Debian 12 -> running appliance (Ctrl-C stops it)
	deploy/run.sh

test:   ## install test dependencies and run the whole suite
	deploy/test.sh

setup:  ## install only (packages, virtualenv, database)
	deploy/setup.sh

bench:  ## control-plane benchmark (root)
	.venv/bin/python bench/control_plane.py
