#!/usr/bin/env bash
# On a CPU with AMX, build llama-cpp-python (the version pinned in requirements/constraints.txt)
# without AMX, once per machine, into a wheel folder that `make setup` installs from, and print
# that folder. Elsewhere print nothing: pip builds it from the sdist as usual.
#
# Why: llama.cpp compiles with -march=native, and on x86 CPUs with AMX (Intel Sapphire Rapids
# and later) its AMX matrix kernels crash with a segmentation fault on the embedded Gemma 3
# 270M (ggml_backend_amx_mul_mat). Here AMX is switched off and the rest of the CPU's
# instruction set (AVX2, AVX-512) stays on. pip's own wheel cache keys a build by the sdist
# alone, not by these flags, so the wheel is kept in a folder named after them instead.
#
#   scripts/build_llama_wheel.sh PYTHON   (PYTHON: the venv's interpreter)
set -euo pipefail

python=${1:?usage: build_llama_wheel.sh PYTHON}
here=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^llama[-_]cpp[-_]python==//p' "$here/requirements/constraints.txt")
if [[ -z "$version" ]]; then
    echo "build_llama_wheel.sh: no llama-cpp-python pin in requirements/constraints.txt" >&2
    exit 1
fi

if ! grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    exit 0
fi
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
tag=$(printf '%s|%s|%s' "$version" "$flags" "$("$python" -c 'import sys; print(sys.version_info[:2])')" |
    sha256sum | cut -c1-12)
cache=${OMNIFLOW_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/omniflow/wheels}
dir="$cache/llama-cpp-python-$version-$tag"

if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version without AMX (8-18 min, once per machine)" >&2
    mkdir -p "$dir.part"
    CMAKE_ARGS="-DCMAKE_C_FLAGS=\"$flags\" -DCMAKE_CXX_FLAGS=\"$flags\"" \
        "$python" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python \
        -w "$dir.part" "llama-cpp-python==$version" >&2
    rm -rf "$dir"
    mv "$dir.part" "$dir"
fi
echo "$dir"
