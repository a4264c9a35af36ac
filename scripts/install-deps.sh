#!/usr/bin/env bash
# Installs the Debian 12 packages geoccl builds, tests and benchmarks with. Idempotent.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build clang libclang-rt-14-dev pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libgloo-dev python3-torch python3-numpy python3-pytest
  iproute2 iptables iperf3 iputils-ping procps gnuplot-nox
  pybind11-dev libtorch-dev python3-sklearn
  liblz4-dev libzstd-dev libxxhash-dev python3-torchvision
  etcd-server libcpp-httplib-dev prometheus tmux
  libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev
  libsodium-dev libssl-dev
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
