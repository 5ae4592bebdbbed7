"""Starts `peregrine serve` on a free loopback port and stops it with SIGTERM."""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, binary, model, extra_args=()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(self.port), *extra_args]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.proc.stdout.read()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("server did not become healthy in 180 s")

    def metrics(self):
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code (the server must drain and exit 0)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode
