#!/usr/bin/env bash
# Everything a fresh machine needs besides `npm install`, from Debian's packages: a Java runtime for
# DynamoDB Local (the AWS integration tests) and Chromium for the browser tests of the approval and
# inspector pages (driven by playwright-core; it never downloads a browser of its own), and strace, with
# which bench/fsync-count.ts counts the fsyncs of a step.
# Idempotent: does nothing when they are already there.
set -euo pipefail
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || missing+=(chromium)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
java -version 2>&1 | head -n 1
/usr/bin/chromium --version 2>/dev/null || chromium --version
