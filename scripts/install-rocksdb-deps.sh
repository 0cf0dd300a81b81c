#!/usr/bin/env bash
# Installs what the `rocksdb` bench peer needs to build (bindgen needs
# libclang). Then: cargo build --release -p cairn --features rocksdb
# (about 15 minutes on 2 cores: RocksDB's C++ sources).
set -euo pipefail
if ! dpkg -s libclang-dev clang >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev clang
fi
