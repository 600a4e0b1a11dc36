#!/usr/bin/env bash
# Installs the local S3-compatible server used by the tests (moto, from PyPI).
set -euo pipefail
python3 -m pip install -q --disable-pip-version-check 'moto[server]==5.2.1' 'boto3'
