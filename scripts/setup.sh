#!/usr/bin/env bash
# Everything a fresh machine needs besides `npm install`: a Java runtime for DynamoDB Local (the AWS
# integration tests). Idempotent: does nothing when it is already there.
set -euo pipefail
if ! command -v java >/dev/null 2>&1; then
  echo "setup: installing a Java runtime for DynamoDB Local"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q default-jre-headless
fi
java -version 2>&1 | head -n 1
