#!/usr/bin/env bash
# System packages the test suite uses, from Debian's archive, installed only when missing (make test calls this):
# headless Chromium + chromedriver for the HTML report's browser test, PostgreSQL for the run-history test, and
# Prometheus (promtool and the server) for the alerting-rule tests.
# Without apt (or root), their tests skip with the reason.
set -u
command -v apt-get >/dev/null 2>&1 || exit 0
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v chromedriver >/dev/null 2>&1 || missing="$missing chromium-driver"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || missing="$missing prometheus"
[ -z "$missing" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing) \
  || echo "install_test_system_packages: could not install$missing; their tests skip with the reason"
exit 0
