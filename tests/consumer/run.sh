#!/usr/bin/env bash
# Builds tests/consumer against an installed zarrcoro, twice (find_package and
# pkg-config), and runs both. CTest runs it as `consumer_package`.
#   tests/consumer/run.sh BUILD_DIR [WORK_DIR]
# installs the already built BUILD_DIR into WORK_DIR/prefix (cmake --install,
# no rebuild) and builds the consumer in WORK_DIR (default: BUILD_DIR/consumer).
# CXX picks the compiler (default c++). The consumer is compiled at -O0, where
# an Asio configuration that differed from the library's would not be
# hidden by inlining.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [WORK_DIR]}" && pwd)
work=${2:-$build/consumer}
cxx=${CXX:-c++}
launcher=$(command -v ccache || true)
prefix=$work/prefix

rm -rf "$prefix"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

echo "== find_package(zarrcoro)"
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx" \
  ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log"
cmake --build "$work/cmake"
"$work/cmake/consumer"

echo "== pkg-config zarrcoro"
pc=$(dirname "$(find "$prefix" -name zarrcoro.pc | head -n1)")
export PKG_CONFIG_PATH=$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
libdir=$(pkg-config --variable=libdir zarrcoro)
echo "cflags: $(pkg-config --cflags zarrcoro)"
echo "libs:   $(pkg-config --libs zarrcoro)"
# shellcheck disable=SC2046  # word splitting of the flags is intended
$launcher "$cxx" -std=c++20 -O0 -g -c -o "$work/consumer-pc.o" "$here/main.cpp" $(pkg-config --cflags zarrcoro)
# shellcheck disable=SC2046
"$cxx" -o "$work/consumer-pc" "$work/consumer-pc.o" $(pkg-config --libs zarrcoro) -Wl,-rpath,"$libdir"
"$work/consumer-pc"
