#!/usr/bin/python3
"""http_backend.py NAME PORT [HOST] -- a stub HTTP/1.1 member for the http
mode's tests: it answers every request with what it saw, so a test can
check which member served it and what chashd forwarded.

  any path          200, JSON: member, method, target, version, headers
                    (a list of [name, value] as received), body (text),
                    body_len, chunked (whether the body came chunked), conn
                    (a number per TCP connection, to see keep-alive reuse)
  /status/NNN       that status, the same JSON (no body for 204/304)
  /chunked?n=K      a chunked response of K chunks
  /big?n=BYTES      a body of BYTES bytes ('x'), Content-Length
  /slow?ms=MS       answers after MS milliseconds
  /reset            resets the connection before any byte (SO_LINGER 0)
  /close            closes the connection before any byte
  /garbage          answers bytes that are not HTTP
  /close-delimited  a response without length, ended by the close
  /ws               a WebSocket-like upgrade: 101, then echoes bytes
  /health           200 "ok" (or what the file NAME.health says: a status)
"""
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

NAME = sys.argv[1]
PORT = int(sys.argv[2])
HOST = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
CONN_IDS = iter(range(1, 1 << 30))
LOCK = threading.Lock()


def read_head(f):
    lines = []
    while True:
        line = f.readline(65537)
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            return lines
        lines.append(line.rstrip(b"\r\n"))


def read_chunked(f):
    body = b""
    while True:
        size_line = f.readline(1024)
        if not size_line:
            raise EOFError
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:  # trailers
                t = f.readline(65537)
                if t in (b"\r\n", b"\n", b""):
                    return body
        body += f.read(size)
        f.read(2)


class Handler(socketserver.StreamRequestHandler):
    def send(self, status, body, headers=(), reason="OK"):
        out = "HTTP/1.1 %d %s\r\n" % (status, reason)
        for k, v in headers:
            out += "%s: %s\r\n" % (k, v)
        if status not in (204, 304) and not any(
                k.lower() == "content-length" for k, _ in headers):
            out += "Content-Length: %d\r\n" % len(body)
        out += "\r\n"
        data = out.encode() + (b"" if status in (204, 304) else body)
        self.wfile.write(data)
        self.wfile.flush()

    def handle(self):
        with LOCK:
            conn = next(CONN_IDS)
        f = self.rfile
        while True:
            try:
                head = read_head(f)
            except (ConnectionError, OSError):
                return
            if not head:
                return
            line = head[0].decode("latin-1")
            method, target, version = line.split(" ", 2)
            headers = []
            for h in head[1:]:
                k, _, v = h.decode("latin-1").partition(":")
                headers.append([k, v.strip()])
            hmap = {k.lower(): v for k, v in headers}
            chunked = hmap.get("transfer-encoding", "").lower() == "chunked"
            try:
                if chunked:
                    body = read_chunked(f)
                else:
                    body = f.read(int(hmap.get("content-length", "0")))
            except (EOFError, ValueError, OSError):
                return
            if hmap.get("expect", "").lower() == "100-continue":
                pass  # the body came anyway: curl waits 1 s, then sends
            url = urllib.parse.urlsplit(target)
            q = dict(urllib.parse.parse_qsl(url.query))
            path = url.path
            info = {"member": NAME, "method": method, "target": target,
                    "version": version, "headers": headers,
                    "body": body.decode("latin-1"), "body_len": len(body),
                    "chunked": chunked, "conn": conn}
            payload = json.dumps(info).encode()
            close = hmap.get("connection", "").lower() == "close" or \
                version == "HTTP/1.0" and \
                hmap.get("connection", "").lower() != "keep-alive"
            extra = [("Content-Type", "application/json"),
                     ("X-Member", NAME)]
            if close:
                extra.append(("Connection", "close"))
            if path == "/reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
                return
            if path == "/close":
                return
            if path == "/garbage":
                self.wfile.write(b"SPDY/9 what\r\n\r\n")
                self.wfile.flush()
                return
            if path == "/health":
                status = 200
                try:
                    with open(os.path.join(os.path.dirname(
                            os.path.abspath(__file__)), NAME + ".health")) as h:
                        status = int(h.read().strip())
                except (OSError, ValueError):
                    pass
                self.send(status, b"ok\n", extra, "Health")
            elif path.startswith("/status/"):
                self.send(int(path[8:]), payload, extra, "Status")
            elif path == "/slow":
                time.sleep(int(q.get("ms", "100")) / 1000)
                self.send(200, payload, extra)
            elif path == "/big":
                self.send(200, b"x" * int(q.get("n", "65536")), extra)
            elif path == "/chunked":
                n = int(q.get("n", "3"))
                out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" \
                      "X-Member: %s\r\n\r\n" % NAME
                data = out.encode()
                for i in range(n):
                    piece = ("%s-%d;" % (NAME, i)).encode()
                    data += b"%x\r\n%s\r\n" % (len(piece), piece)
                data += b"0\r\nX-Trailer: yes\r\n\r\n"
                self.wfile.write(data)
                self.wfile.flush()
            elif path == "/close-delimited":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Member: " +
                                 NAME.encode() + b"\r\n\r\n" + payload)
                self.wfile.flush()
                return
            elif path == "/ws":
                self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\n"
                                 b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                 b"X-Member: " + NAME.encode() + b"\r\n\r\n")
                self.wfile.flush()
                while True:
                    data = self.connection.recv(65536)
                    if not data:
                        return
                    self.connection.sendall(data.upper())
            else:
                self.send(200, payload, extra)
            if close:
                return


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 1024


if __name__ == "__main__":
    srv = Server((HOST, PORT), Handler)
    print("ready", flush=True)
    srv.serve_forever()
