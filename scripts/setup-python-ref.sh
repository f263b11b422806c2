#!/usr/bin/env bash
# setup-python-ref.sh - the Python reference implementations the tests compare against
# (HF transformers on Debian's torch, HF tokenizers), in a venv at build/pyref (idempotent).
# Never used by rlrun itself: test references only.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RLRUN_PYREF:-build/pyref}
if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
# pinned in tests/python-ref-requirements.txt (versions that run on Debian's torch 1.13)
if [ -f tests/python-ref-requirements.txt ] && \
   ! cmp -s tests/python-ref-requirements.txt "$VENV/.installed-requirements"; then
  "$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python-ref-requirements.txt
  cp tests/python-ref-requirements.txt "$VENV/.installed-requirements"
fi
echo "setup-python-ref: $VENV ready"
