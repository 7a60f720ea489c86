#!/usr/bin/env bash
# Packs the braid binary built here (build/, with the CUDA backend) for the
# GPU machine: build-gpu/frontend/braid, build-gpu/engine/braid_gpu_check
# (what scripts/gpu/run_all.sh runs), the CUDA kernel tests and benchmarks in build-gpu/kernels/ and,
# in build-gpu/lib, the shared
# libraries that machine lacks (libedit, Lua, SQLite and their own
# dependencies). cuBLAS is found there under /usr/local/cuda. Pass
# build-gpu to `run` as a carried path, and on the machine run with
#   LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib
# With BASE_REV set (a commit), braid_gpu_check is also built at that
# commit, in a worktree under /tmp (ccache makes it quick after a build of
# that commit), into build-gpu/base/: the BASE of attention_check.sh's
# decode stage, so that a change and the build before it alternate in one call.
# usage: [BASE_REV=REV] scripts/gpu/pack_braid.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bin=$build/frontend/braid
[ -x "$bin" ] || { echo "no $bin: build first (scripts/build.sh)" >&2; exit 1; }
[ "$(nm -C "$bin" | grep -c "braid::kernels::cuda")" -gt 0 ] || { echo "$bin has no CUDA backend" >&2; exit 1; }
rm -rf build-gpu/frontend build-gpu/engine build-gpu/kernels build-gpu/lib build-gpu/base
mkdir -p build-gpu/frontend build-gpu/engine build-gpu/lib
cp "$bin" build-gpu/frontend/braid
strip build-gpu/frontend/braid
cp "$build/engine/braid_gpu_check" build-gpu/engine/
strip build-gpu/engine/braid_gpu_check
# The CUDA kernel tests (against fp32 loops) and benchmarks, when built.
mkdir -p build-gpu/kernels
for t in kernels_ops_cuda_tests kernels_dequant_cuda_tests cuda_cascade_bench cuda_gemv_bench cuda_layers_bench; do
  [ -x "$build/kernels/$t" ] && cp "$build/kernels/$t" build-gpu/kernels/ && strip build-gpu/kernels/$t
done
for lib in libedit.so.2 liblua5.4.so.0 libsqlite3.so.0 libtinfo.so.6 libbsd.so.0 libmd.so.0; do
  path=$(ldd "$bin" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] || { echo "braid does not link $lib" >&2; continue; }
  cp -L "$path" build-gpu/lib/
done
if [ -n "${BASE_REV:-}" ]; then
  rev=$(git rev-parse --short "$BASE_REV")
  tree=/tmp/braid-base-$rev
  [ -d "$tree" ] || git worktree add -f --detach "$tree" "$rev" >/dev/null
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$tree CCACHE_NOHASHDIR=true
  cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
  cmake --build "$tree/build" -j "$(nproc)" --target braid_gpu_check >/dev/null
  mkdir -p build-gpu/base
  cp "$tree/build/engine/braid_gpu_check" build-gpu/base/
  strip build-gpu/base/braid_gpu_check
  echo "base: braid_gpu_check at $rev in build-gpu/base"
fi
du -sh build-gpu | sed 's/^/packed: /'
