#!/usr/bin/env bash
# Run `ansible-test sanity` offline-safe.
#
# ansible-test wants the collection under a path ending ansible_collections/<ns>/<name> and refuses
# a symlinked one, so the tree is copied there. `--venv` bootstraps pip in each test venv from a
# get-pip script it downloads from a host outside the package registries; we pre-seed that script
# with a few lines that install the pip wheel fetched from the registry (pip download).
#
# usage: tools/ansible_test_sanity.sh DEST [ansible-test sanity args...]
set -euo pipefail
dest=${1:?usage: $0 DEST [ansible-test args]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(command -v python)
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# 1. a fresh copy of the collection (tracked and untracked files, no build outputs)
rm -rf "$dest"
mkdir -p "$dest"
tar -C "$root" \
    --exclude=./.venv --exclude='./.venv-*' --exclude=./build --exclude=./collections \
    --exclude=./results --exclude=./tests/output --exclude=./.git --exclude='__pycache__' \
    --exclude=./.whl --exclude=./.gl --exclude=./.cache --exclude=./.pytest_cache \
    -cf - . | tar -C "$dest" -xf -
# ansible-test only looks at files git knows about when a .git is present; give it a private one
git -C "$dest" init -q
git -C "$dest" add -A
git -C "$dest" -c user.email=ci@invalid -c user.name=ci commit -qm sanity --no-verify

# 2. the pip bootstrap ansible-test would download
pip_version=$("$python" - <<'PY'
import re, ansible_test, pathlib
src = (pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
cache="$HOME/.ansible/test/cache"
script="$cache/get_pip_${pip_version//./_}.py"
wheels="$cache/wheels"
mkdir -p "$wheels"
wheel=$(ls "$wheels"/pip-"$pip_version"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
    # into a directory of its own, then moved: a second run at once never sees half a wheel
    tmp_wheels=$(mktemp -d "$wheels/.download.XXXXXX")
    "$python" -m pip download -q --no-deps --only-binary=:all: -d "$tmp_wheels" "pip==$pip_version"
    mv -f "$tmp_wheels"/pip-*.whl "$wheels"/
    rmdir "$tmp_wheels"
    wheel=$(ls "$wheels"/pip-"$pip_version"-*.whl | head -1)
fi
# written to a temp file then renamed: the sanity runs of two ansible-core versions may seed it at once
cat > "$script.$$" <<PY
# Seeded by inferops.serving tools/ansible_test_sanity.sh: installs pip $pip_version from a local wheel.
import sys
WHEEL = "$wheel"
sys.path.insert(0, WHEEL)
from pip._internal.cli.main import main  # noqa: E402
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel") and not a.startswith("pip==")]
sys.exit(main(["install", "--no-cache-dir", WHEEL] + args))
PY
mv -f "$script.$$" "$script"

# 3. the sanity tests themselves
cd "$dest"
exec ansible-test sanity --venv --python "$pyver" --color no "$@"
