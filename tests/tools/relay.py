#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""relay.py LISTEN_PORT TARGET_PORT: a TCP relay on 127.0.0.1 for partition tests.

Forwards every connection to LISTEN_PORT to TARGET_PORT, both ways, byte for byte.  A test cuts
the link by freezing the relay (kill -STOP: the bytes stop, the sockets stay open, as in a
network partition that drops packets) and heals it with kill -CONT.
"""
import selectors
import socket
import sys


def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    sel = selectors.DefaultSelector()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(64)
    sel.register(srv, selectors.EVENT_READ, None)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                client, _ = srv.accept()
                try:
                    upstream = socket.create_connection(("127.0.0.1", target_port), timeout=5)
                except OSError:
                    client.close()
                    continue
                sel.register(client, selectors.EVENT_READ, upstream)
                sel.register(upstream, selectors.EVENT_READ, client)
                continue
            src, dst = key.fileobj, key.data
            try:
                data = src.recv(65536)
                if data:
                    dst.sendall(data)
                    continue
            except OSError:
                pass
            for s in (src, dst):
                try:
                    sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()


if __name__ == "__main__":
    main()
