"""Drive headless Chromium over the DevTools protocol with the standard library only.

Used by the page test: start Chromium with a debugging port, open a websocket to the page
target (RFC 6455 client frames, masked), evaluate JavaScript, read results.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    def __init__(self, url: str) -> None:
        exe = chromium_path()
        if exe is None:
            raise RuntimeError("no Chromium")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.profile = tempfile.mkdtemp()
        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--remote-debugging-port={port}", f"--user-data-dir={self.profile}",
             url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = self._target(port)
        path = target.split("//", 1)[1].split("/", 1)[1]
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(4096)
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise RuntimeError("websocket upgrade refused")
        self.next_id = 0

    def _target(self, port: int) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                    for t in json.loads(r.read()):
                        if t.get("type") == "page":
                            return str(t["webSocketDebuggerUrl"])
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("Chromium did not open a debugging target")

    def _send(self, payload: bytes) -> None:
        header = bytearray([0x81])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 65536:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        mask = os.urandom(4)
        header += mask
        self.sock.sendall(bytes(header) + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("websocket closed")
            data += chunk
        return data

    def _recv(self) -> dict[str, Any]:
        while True:
            first, second = self._recv_exact(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            if first & 0x0F == 1:
                return dict(json.loads(payload))

    def evaluate(self, expression: str) -> Any:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": "Runtime.evaluate",
                               "params": {"expression": expression,
                                          "returnByValue": True}}).encode())
        while True:
            message = self._recv()
            if message.get("id") == self.next_id:
                return message["result"]["result"].get("value")

    def screenshot(self, path: str) -> None:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": "Page.captureScreenshot"}).encode())
        while True:
            message = self._recv()
            if message.get("id") == self.next_id:
                with open(path, "wb") as handle:
                    handle.write(base64.b64decode(message["result"]["data"]))
                return

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)
