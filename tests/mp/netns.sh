# Sourced by the tests that run their ranks in a network namespace of their own (unshare -n):
# skips the test (exit 77) without root, iptables or unshare, and makes $logs, removed on exit.
if [ "$(id -u)" != 0 ] || ! command -v iptables >/dev/null || ! command -v unshare >/dev/null; then
  echo "needs root, iptables and unshare: skipped"
  exit 77
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
