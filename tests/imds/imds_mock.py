#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""imds_mock.py: a stand-in for the EC2 instance metadata service (IMDSv2 only), for tests.

It follows the real protocol as muster-worker meets it (docs/design.md §5, issue 4):

  PUT /latest/api/token         needs "X-aws-ec2-metadata-token-ttl-seconds: 1..21600"
                                (400 without it or out of range, 403 with X-Forwarded-For);
                                200 text/plain, the token as the body, the TTL echoed in the
                                X-aws-ec2-metadata-token-ttl-seconds response header.  A token
                                expires after its TTL.
  GET  /latest/...              needs "X-aws-ec2-metadata-token: <live token>", else 401.
    /latest/meta-data/instance-type                      text/plain   (--instance-type)
    /latest/meta-data/placement/availability-zone        text/plain   (--zone)
    /latest/meta-data/instance-life-cycle                text/plain   (--lifecycle)
    /latest/meta-data/instance-id                        text/plain   (--instance-id)
    /latest/meta-data/spot/instance-action               404 until a notice, then 200
        {"action": "terminate", "time": "2026-11-22T08:22:00Z"}
    /latest/meta-data/events/recommendations/rebalance   404 until a recommendation, then 200
        {"noticeTime": "2026-11-22T08:20:00Z"}
  Anything else under /latest is 404 with EC2's XHTML 404 page.  Like EC2, JSON documents are
  served as text/plain; the server calls itself "EC2ws".

Control (tests only; POST with an optional JSON body, answered 200 {"ok": true, ...}):
  POST /mock/notice          {"action": "terminate"|"stop"|"hibernate", "in_s": 120}
                             starts a spot interruption notice due in in_s seconds (defaults
                             terminate, 120); the time is whole seconds, as EC2 gives it
  POST /mock/rebalance       {} starts a rebalance recommendation noticed now
  POST /mock/clear           clears the notice and the recommendation
  POST /mock/expire-tokens   every token issued so far stops working (GETs with it get 401)
  POST /mock/garble          {"count": 1} the next count metadata GETs get 200 with garbage
  POST /mock/stall           {"count": 1, "ms": 3000} the next count metadata GETs answer late
  GET  /mock/stats           {"token_puts": N, "gets": N, "unauthorized": N, "ttl_last": S,
                              "notice_started_ms": wall ms or 0, ...}

Usage:
  python3 tests/imds/imds_mock.py [--port 0] [--port-file FILE] [--instance-type p5.48xlarge]
                                  [--zone us-east-1a] [--lifecycle spot]
                                  [--instance-id i-0123456789abcdef0]
  It prints "imds_mock listening on 127.0.0.1:PORT" on stdout and writes PORT to --port-file
  (written to a temp file and renamed, so a reader never sees half a number).  SIGTERM or
  SIGINT stops it.  Example:
    python3 tests/imds/imds_mock.py --port-file /tmp/imds.port &
    curl -s -X POST -d '{"action":"terminate","in_s":120}' http://127.0.0.1:$(cat /tmp/imds.port)/mock/notice

Python 3 standard library only.
"""
import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_MAX_S = 21600


def ec2_error_page(code, text):
    # The XHTML page EC2's metadata service sends with its 4xx answers.
    return (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
        '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
        " <head>\n"
        "  <title>%d - %s</title>\n"
        " </head>\n"
        " <body>\n"
        "  <h1>%d - %s</h1>\n"
        " </body>\n"
        "</html>\n" % (code, text, code, text)
    ).encode("ascii")


def iso_utc(epoch_s):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.identity = {
            "/latest/meta-data/instance-type": args.instance_type,
            "/latest/meta-data/placement/availability-zone": args.zone,
            "/latest/meta-data/instance-life-cycle": args.lifecycle,
            "/latest/meta-data/instance-id": args.instance_id,
        }
        self.tokens = {}  # token -> monotonic expiry (s)
        self.notice = None  # JSON text of the instance action
        self.rebalance = None  # JSON text of the recommendation
        self.garble = 0
        self.stall = 0
        self.stall_ms = 0
        self.stats = {
            "token_puts": 0,
            "gets": 0,
            "unauthorized": 0,
            "ttl_last": 0,
            "notice_started_ms": 0,
            "rebalance_started_ms": 0,
            "action_200": 0,
        }


class Handler(BaseHTTPRequestHandler):
    server_version = "EC2ws"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # keep-alive, as EC2; every reply has a Content-Length
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK add 40 ms to every reply, which EC2 does not.
    disable_nagle_algorithm = True

    def handle(self):
        # A client that gives up (its timeout, a stalled reply) is normal here, not a traceback.
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def version_string(self):
        return "EC2ws"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("imds_mock: " + (fmt % args) + "\n")

    def reply(self, code, body, ctype="text/plain", headers=None):
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error_page(self, code, text):
        self.reply(code, ec2_error_page(code, text), "text/html")

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    # ---- IMDSv2 ----

    def do_PUT(self):
        st = self.server.state
        self.read_body()
        if self.path != "/latest/api/token":
            return self.error_page(404, "Not Found")
        if self.headers.get("X-Forwarded-For") is not None:
            return self.error_page(403, "Forbidden")
        ttl_text = self.headers.get(TTL_HEADER)
        try:
            ttl = int(ttl_text)
        except (TypeError, ValueError):
            ttl = 0
        if ttl < 1 or ttl > TTL_MAX_S:
            return self.error_page(400, "Bad Request")
        token = secrets.token_urlsafe(42)
        with st.lock:
            st.tokens[token] = time.monotonic() + ttl
            st.stats["token_puts"] += 1
            st.stats["ttl_last"] = ttl
        self.reply(200, token, headers={TTL_HEADER: str(ttl)})

    def token_ok(self):
        st = self.server.state
        token = self.headers.get(TOKEN_HEADER)
        with st.lock:
            exp = st.tokens.get(token) if token else None
            ok = exp is not None and time.monotonic() < exp
            if not ok:
                st.stats["unauthorized"] += 1
        return ok

    def do_GET(self):
        st = self.server.state
        if self.path == "/mock/stats":
            with st.lock:
                return self.reply(200, json.dumps(st.stats), "application/json")
        if self.path == "/latest/api/token":
            return self.error_page(405, "Method Not Allowed")
        if not self.path.startswith("/latest"):
            return self.error_page(404, "Not Found")
        if not self.token_ok():
            return self.error_page(401, "Unauthorized")
        with st.lock:
            st.stats["gets"] += 1
            garble = st.garble > 0
            if garble:
                st.garble -= 1
            stall_ms = 0
            if st.stall > 0:
                st.stall -= 1
                stall_ms = st.stall_ms
            notice = st.notice
            rebalance = st.rebalance
        if stall_ms:
            time.sleep(stall_ms / 1000.0)
        if garble:
            return self.reply(200, b'{"action": \x00\xff\xfe garbled <<<', "text/plain")
        if self.path in st.identity:
            return self.reply(200, st.identity[self.path])
        if self.path == "/latest/meta-data/spot/instance-action":
            if notice is None:
                return self.error_page(404, "Not Found")
            with st.lock:
                st.stats["action_200"] += 1
            return self.reply(200, notice)
        if self.path == "/latest/meta-data/events/recommendations/rebalance":
            if rebalance is None:
                return self.error_page(404, "Not Found")
            return self.reply(200, rebalance)
        return self.error_page(404, "Not Found")

    # ---- control ----

    def do_POST(self):
        st = self.server.state
        raw = self.read_body()
        try:
            body = json.loads(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise ValueError("expected an object")
        except ValueError as e:
            return self.reply(400, json.dumps({"ok": False, "error": str(e)}), "application/json")
        out = {"ok": True}
        now = time.time()
        with st.lock:
            if self.path == "/mock/notice":
                action = body.get("action", "terminate")
                in_s = int(body.get("in_s", 120))
                t = iso_utc(int(now) + in_s)
                st.notice = json.dumps({"action": action, "time": t})
                st.stats["notice_started_ms"] = int(now * 1000)
                out["time"] = t
            elif self.path == "/mock/rebalance":
                t = iso_utc(int(now))
                st.rebalance = json.dumps({"noticeTime": t})
                st.stats["rebalance_started_ms"] = int(now * 1000)
                out["noticeTime"] = t
            elif self.path == "/mock/clear":
                st.notice = None
                st.rebalance = None
            elif self.path == "/mock/expire-tokens":
                out["expired"] = len(st.tokens)
                st.tokens.clear()
            elif self.path == "/mock/garble":
                st.garble = int(body.get("count", 1))
            elif self.path == "/mock/stall":
                st.stall = int(body.get("count", 1))
                st.stall_ms = int(body.get("ms", 3000))
            else:
                return self.error_page(404, "Not Found")
        self.reply(200, json.dumps(out), "application/json")


def main():
    p = argparse.ArgumentParser(description="EC2 IMDSv2 stand-in for muster tests")
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = pick one)")
    p.add_argument("--port-file", help="write the port number here")
    p.add_argument("--instance-type", default="p5.48xlarge")
    p.add_argument("--zone", default="us-east-1a")
    p.add_argument("--lifecycle", default="spot", choices=["spot", "on-demand"])
    p.add_argument("--instance-id", default="i-0123456789abcdef0")
    p.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = p.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.state = State(args)
    server.verbose = args.verbose
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    print("imds_mock listening on 127.0.0.1:%d" % port, flush=True)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever(poll_interval=0.2)
    server.server_close()


if __name__ == "__main__":
    main()
