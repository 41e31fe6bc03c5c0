#!/usr/bin/python3
"""http_backend.py NAME PORT [HOST] [FAIL] [MODE_FILE] -- a stub HTTP/1.1 member for the http
mode's tests: it answers every request with what it saw, so a test can
check which member served it and what chashd forwarded.

  any path          200, JSON: member, method, target, version, headers
                    (a list of [name, value] as received), body (text),
                    body_len, chunked (whether the body came chunked), conn
                    (a number per TCP connection, to see keep-alive reuse),
                    served (requests read whole so far, this one included)
  /status/NNN       that status, the same JSON (no body for 204/304)
  /chunked?n=K      a chunked response of K chunks
  /big?n=BYTES      a body of BYTES bytes ('x'), Content-Length
  /slow?ms=MS       answers after MS milliseconds
  /reset            resets the connection before any byte (SO_LINGER 0)
  /close            closes the connection before any byte
  /garbage          answers bytes that are not HTTP
  /close-delimited  a response without length, ended by the close
  /ws               a WebSocket-like upgrade: 101, then echoes bytes
A request with `Expect: 100-continue` gets `100 Continue` before its body
is read. FAIL (reset, close, garbage, hang) makes every request fail so.
MODE_FILE, read at each request, switches every answer at run time: a
status (503: that status, the member's name as the body; 200 or no file:
answers as above), `garbage`, `close` (nothing), `silent` (holds the
connection until the peer closes). Each request's head is noted as a JSON
line {"mode", "head"} in MODE_FILE.requests.
"""
import base64
import hashlib
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
FAIL = sys.argv[4] if len(sys.argv) > 4 else ""
MODE_FILE = sys.argv[5] if len(sys.argv) > 5 else ""


def mode_now():
    try:
        with open(MODE_FILE) as f:
            return f.read().strip() or "200"
    except OSError:
        return "200"


def note(mode, head):
    """The request's head as it came (its lines joined by CRLF)."""
    raw = b"".join(line + b"\r\n" for line in head) + b"\r\n"
    with LOCK, open(MODE_FILE + ".requests", "a") as f:
        f.write(json.dumps({"mode": mode, "head": raw.decode("latin-1")}) +
                "\n")
CONN_IDS = iter(range(1, 1 << 30))
SERVED = iter(range(1, 1 << 30))
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

    def websocket(self, hmap):
        """RFC 6455: the handshake, then each text frame echoed back as
        "<member>: <text>" (frames up to 125 bytes; a close frame ends)."""
        key = hmap.get("sec-websocket-key", "")
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\n"
                         b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n"
                         b"X-Member: " + NAME.encode() + b"\r\n\r\n")
        self.wfile.flush()
        f = self.rfile
        while True:
            hdr = f.read(2)
            if len(hdr) < 2:
                return
            opcode, n = hdr[0] & 0x0F, hdr[1] & 0x7F
            mask = f.read(4) if hdr[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                self.wfile.flush()
                return
            out = NAME.encode() + b": " + data
            self.wfile.write(bytes([0x81, len(out)]) + out)
            self.wfile.flush()

    def switched(self, mode):
        """Answer as MODE_FILE says; True: the connection is done."""
        if mode == "garbage":
            self.wfile.write(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            self.wfile.flush()
        elif mode == "silent":
            while self.connection.recv(4096):
                pass
        elif mode.isdigit():
            self.send(int(mode), (NAME + "\n").encode(),
                      [("Connection", "close")], "Switched")
        return True

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
            if MODE_FILE:
                mode = mode_now()
                note(mode, head)
                if mode != "200" and self.switched(mode):
                    return
            line = head[0].decode("latin-1")
            method, target, version = line.split(" ", 2)
            headers = []
            for h in head[1:]:
                k, _, v = h.decode("latin-1").partition(":")
                headers.append([k, v.strip()])
            hmap = {k.lower(): v for k, v in headers}
            chunked = hmap.get("transfer-encoding", "").lower() == "chunked"
            if hmap.get("expect", "").lower() == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.wfile.flush()
            try:
                if chunked:
                    body = read_chunked(f)
                else:
                    body = f.read(int(hmap.get("content-length", "0")))
            except (EOFError, ValueError, OSError):
                return
            with LOCK:
                served = next(SERVED)
            url = urllib.parse.urlsplit(target)
            q = dict(urllib.parse.parse_qsl(url.query))
            path = url.path
            if FAIL:
                path = "/" + FAIL
            info = {"member": NAME, "method": method, "target": target,
                    "version": version, "headers": headers,
                    "body": body.decode("latin-1"), "body_len": len(body),
                    "chunked": chunked, "conn": conn, "served": served}
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
            if path == "/hang":
                time.sleep(60)
                return
            if path == "/garbage":
                self.wfile.write(b"SPDY/9 what\r\n\r\n")
                self.wfile.flush()
                return
            if path.startswith("/status/"):
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
                self.websocket(hmap)
                return
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
