#!/bin/sh
# Install a Prometheus server for bench/endurance.py (Debian's package; not part of `make setup`).
#
# Idempotent: does nothing when `prometheus` is on PATH already. The benchmark runs the binary itself,
# with its own config and data dir on 127.0.0.1; the package's system service must not start, so the
# install runs under a policy-rc.d that forbids service starts (Docker images ship one already), and
# where systemd runs, the service is stopped and disabled afterwards.
set -eu

if command -v prometheus >/dev/null 2>&1; then
    echo "prometheus: $(prometheus --version 2>&1 | head -1)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
POLICY=/usr/sbin/policy-rc.d
ADDED=
if [ ! -e "$POLICY" ]; then
    # 101 = "action not allowed": dpkg's maintainer scripts then do not start prometheus.service
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    ADDED=1
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends prometheus || {
    [ -n "$ADDED" ] && $SUDO rm -f "$POLICY"
    echo "apt-get install prometheus failed: run 'apt-get update' first, or put a prometheus binary on PATH" >&2
    exit 1
}
[ -n "$ADDED" ] && $SUDO rm -f "$POLICY"
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    # the system service would bind 0.0.0.0:9090; the benchmark starts its own server on a free loopback port
    $SUDO systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
fi
echo "prometheus: $(prometheus --version 2>&1 | head -1)"
