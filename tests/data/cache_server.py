"""A small threaded HTTP server that serves a Nix binary-cache directory, with fault injection.

Run: ``python cache_server.py --root DIR [--host 127.0.0.1] [--port 0] [--latency SECONDS]``.
It prints the port it bound on the first line of stdout, then serves until killed.

Test control (never requested by the code under test):
- ``POST /_faults`` with a JSON object ``{"<hash>" | "*": FAULT}`` replaces the fault table;
- ``POST /_reset`` clears faults and the request log;
- ``GET /_log`` returns the request log: ``[{"path", "authorization", "host"}]``.

A FAULT is ``{"mode": ..., "times": N}`` (``times`` absent: every request; else the first N):
- ``status``: answer ``status`` (500, 503, 429, ...), with ``retry_after`` as Retry-After if set;
- ``stall``: sleep ``seconds`` before answering normally (longer than the client's timeout);
- ``reset``: close the connection with a TCP RST without answering;
- ``truncate``: promise the whole narinfo in Content-Length, send half, close;
- ``wrong-storepath``: serve the narinfo with its StorePath swapped for ``store_path``;
- ``bad-sig``: serve the narinfo with one byte of each signature changed;
- ``garbage``: serve ``size`` pseudo-random bytes with status 200;
- ``redirect``: answer ``status`` (default 302) with Location ``location``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import random
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class State:
    def __init__(self, root: Path, latency: float) -> None:
        self.root = root.resolve()
        self.latency = latency
        self.lock = threading.Lock()
        self.faults: dict[str, dict[str, Any]] = {}
        self.used: dict[str, int] = {}
        self.log: list[dict[str, str | None]] = []

    def take_fault(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            for name in (key, "*"):
                fault = self.faults.get(name)
                if fault is None:
                    continue
                times = fault.get("times")
                if times is not None and self.used.get(name, 0) >= times:
                    continue
                self.used[name] = self.used.get(name, 0) + 1
                return fault
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real caches (and the benchmark) rely on it
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test output clean

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without TCP_NODELAY, Nagle's algorithm holds
        # the second until the client's delayed ACK (about 40 ms), which real caches never do.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the connection was reset on purpose
            super().finish()

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "text/x-nix-narinfo" if status == 200 else "text/plain")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_POST(self) -> None:
        state = self.server.state
        body = self._read_body()
        if self.path == "/_faults":
            with state.lock:
                state.faults = json.loads(body)
                state.used = {}
        elif self.path == "/_reset":
            with state.lock:
                state.faults, state.used, state.log = {}, {}, []
        else:
            self._send(404, b"no such control\n")
            return
        self._send(200, b"ok\n")

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/_log":
            with state.lock:
                data = json.dumps(state.log).encode()
            self._send(200, data)
            return
        with state.lock:
            state.log.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "host": self.headers.get("Host"),
                }
            )
        name = self.path.split("?", 1)[0].lstrip("/")
        key = name.removesuffix(".narinfo")
        if state.latency and name.endswith(".narinfo"):
            time.sleep(state.latency)
        fault = state.take_fault(key) if name.endswith(".narinfo") else None
        mode = fault.get("mode") if fault else None
        if mode == "status":
            assert fault is not None
            extra = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            self._send(int(fault["status"]), b"injected\n", extra)
            return
        if mode == "redirect":
            assert fault is not None
            self._send(int(fault.get("status", 302)), b"", {"Location": fault["location"]})
            return
        if mode == "reset":
            self.close_connection = True
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if mode == "garbage":
            assert fault is not None
            rng = random.Random(key)
            self._send(
                200,
                bytes(rng.randrange(256) for _ in range(int(fault.get("size", 300)))),
            )
            return
        if mode == "stall":
            assert fault is not None
            time.sleep(float(fault["seconds"]))

        target = (state.root / name).resolve()
        if state.root not in target.parents or not target.is_file():
            self._send(404, b"404 not found\n")
            return
        body = target.read_bytes()
        if mode == "wrong-storepath":
            assert fault is not None
            lines = [
                f"StorePath: {fault['store_path']}" if line.startswith("StorePath: ") else line
                for line in body.decode().split("\n")
            ]
            body = "\n".join(lines).encode()
        elif mode == "bad-sig":
            lines = []
            for line in body.decode().split("\n"):
                if line.startswith("Sig: "):
                    key_name, _, sig = line[5:].partition(":")
                    raw = bytearray(base64.b64decode(sig))
                    raw[0] ^= 0x01
                    line = f"Sig: {key_name}:{base64.b64encode(bytes(raw)).decode()}"
                lines.append(line)
            body = "\n".join(lines).encode()
        elif mode == "truncate":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(200, body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 drops bursts of concurrent connects

    def __init__(self, address: tuple[str, int], state: State) -> None:
        super().__init__(address, Handler)
        self.state = state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added per narinfo")
    args = parser.parse_args()
    server = Server((args.host, args.port), State(args.root, args.latency))
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
