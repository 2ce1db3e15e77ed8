#!/usr/bin/env bash
# ../2026-12-03-smart-connect/setup.sh with every process in the caller's
# session, so in one scheduler autogroup, as under bench/run.sh.
# Usage: NEW=BIN OLD=BIN bench/results/2026-12-04-noise/setup-one-session.sh
ONE_SESSION=1 exec "$(dirname "$0")/../2026-12-03-smart-connect/setup.sh"
