#!/bin/sh
# promtool_rules.sh DIR - checks DIR/rlrun-rules.yml with promtool and runs its unit tests
# (DIR/rlrun-rules.test.yml). Exit 77 (ctest: skipped) where promtool is not installed.
set -eu
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool is not in PATH; install it with scripts/install-deps.sh --test (Debian package prometheus)"
  exit 77
fi
cd "$1"
promtool check rules rlrun-rules.yml
promtool test rules rlrun-rules.test.yml
