#!/usr/bin/env python3
"""Waits until a server on 127.0.0.1:PORT answers GET /health (up to TRIES x 0.5 s; default
240); exits 0 then, 1 if it never does. Used by the GPU serving jobs (serve.sh, jobs/s47b.sh)."""
import sys
import time
import urllib.request

port = sys.argv[1]
tries = int(sys.argv[2]) if len(sys.argv) > 2 else 240
for _ in range(tries):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(1)
