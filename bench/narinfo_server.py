"""A lean asyncio HTTP/1.1 server for the narinfo benchmark: serves a binary-cache directory
from memory, answering every request after a fixed added latency.

The fault-injecting server the tests use (tests/data/cache_server.py) spends a thread and a
full http.server request parse per request; on a 2-core machine that CPU comes out of the
client being measured. A real cache sits on another machine, so the benchmark uses this one:
one thread, narinfos read once at start, requests parsed only as far as the request line.

Run: ``python narinfo_server.py --root DIR [--latency SECONDS]``; prints its port, then serves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

_HEAD = b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\nContent-Type: %s\r\n\r\n"


class _Http(asyncio.Protocol):
    def __init__(self, files: dict[bytes, bytes], latency: float) -> None:
        self.files = files
        self.latency = latency
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        loop = asyncio.get_running_loop()
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            method, _, rest = head.partition(b" ")
            target = rest.partition(b" ")[0].partition(b"?")[0]
            body = self.files.get(target) if method in (b"GET", b"HEAD") else None
            if body is None:
                answer = _HEAD % (404, b"Not Found", 14, b"text/plain") + b"404 not found\n"
            else:
                kind = b"text/x-nix-narinfo" if target.endswith(b".narinfo") else b"text/plain"
                answer = _HEAD % (200, b"OK", len(body), kind)
                if method == b"GET":
                    answer += body
            if self.latency:
                loop.call_later(self.latency, self._write, answer)
            else:
                self._write(answer)

    def _write(self, answer: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def _serve(root: Path, latency: float) -> None:
    files = {
        b"/" + p.name.encode(): p.read_bytes()
        for p in sorted(root.iterdir())
        if p.is_file() and (p.suffix == ".narinfo" or p.name == "nix-cache-info")
    }
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Http(files, latency), "127.0.0.1", 0, backlog=512)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added per request")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.root, args.latency))


if __name__ == "__main__":
    main()
