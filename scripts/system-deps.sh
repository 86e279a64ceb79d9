#!/usr/bin/env bash
# Install the system programs the test suite drives for real (Debian packages),
# only when they are missing. Tests never skip for want of them.
set -euo pipefail

need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
# The HTML report is tested (and screenshotted) in a real headless browser.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# The PostgreSQL stores are tested against a real server the tests start themselves.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# The MCP tests run npm's reference server (server-everything), installed with npm ci.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing system packages: ${need[*]} (run: sudo apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
