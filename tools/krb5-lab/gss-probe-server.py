#!/usr/bin/env python3
"""A probe in place of an NFSv3 server with Kerberos, for tools/krb5-lab/test.sh.

It answers MOUNT as a Kerberos export would (MNT hands out a handle and
offers RPCSEC_GSS krb5, krb5i and krb5p, flavors 390003-390005, only), so that a kernel client mounting with
sec=krb5 asks its rpc.gssd for a context, and rpc.gssd sends its
RPCSEC_GSS_INIT (RFC 2203) here. Every RPCSEC_GSS call is logged, one line
each, to the log file with its control procedure and the Kerberos names its
token carries; it is refused with RPCSEC_GSS_CREDPROBLEM (no context is ever
made: this is not a server). Other calls get AUTH_TOOWEAK.

usage: gss-probe-server.py ADDR PORT LOGFILE SECONDS   (exits after SECONDS)
"""
import re
import socket
import struct
import sys
import threading
import time

PROG_NFS, PROG_MOUNT = 100003, 100005
AUTH_GSS = 6
FLAVORS_KRB5 = (390003, 390004, 390005)
AUTH_TOOWEAK, RPCSEC_GSS_CREDPROBLEM = 5, 13
RECORD_BYTES_MAX = 1 << 20


def read_record(conn):
    data = b""
    while True:
        head = conn.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        (mark,) = struct.unpack(">I", head)
        length = mark & 0x7FFFFFFF
        if len(data) + length > RECORD_BYTES_MAX:
            return None
        data += conn.recv(length, socket.MSG_WAITALL)
        if mark & 0x80000000:
            return data


def opaque(data, at):
    (n,) = struct.unpack_from(">I", data, at)
    return data[at + 4 : at + 4 + n], at + 4 + ((n + 3) & ~3)


def send_record(conn, body):
    conn.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)


def accepted(xid, results=b""):
    return struct.pack(">IIIIII", xid, 1, 0, 0, 0, 0) + results


def auth_error(xid, stat):
    return struct.pack(">IIIII", xid, 1, 1, 1, stat)


def serve(conn, log):
    with conn:
        while True:
            call = read_record(conn)
            if call is None or len(call) < 24:
                return
            xid, _, _, prog, vers, proc = struct.unpack_from(">IIIIII", call)
            (flavor,) = struct.unpack_from(">I", call, 24)
            cred, at = opaque(call, 28)
            _, at = opaque(call, at + 4)  # the verifier
            if flavor == AUTH_GSS:
                _, gss_proc, seq, _ = struct.unpack_from(">IIII", cred)
                token, _ = opaque(call, at) if len(call) > at else (b"", at)
                names = sorted(set(n.decode() for n in re.findall(rb"[a-z0-9.-]{3,}\.[a-z]{2,}|nfs|host", token)))
                log.write(f"GSS prog={prog} vers={vers} proc={proc} gss_proc={gss_proc} seq={seq} "
                          f"token_bytes={len(token)} names={','.join(names)}\n")
                log.flush()
                send_record(conn, auth_error(xid, RPCSEC_GSS_CREDPROBLEM))
            elif prog == PROG_MOUNT and proc == 0:
                send_record(conn, accepted(xid))
            elif prog == PROG_MOUNT and proc == 1:
                handle = b"krb5prob"
                flavors = struct.pack(">I", len(FLAVORS_KRB5)) + b"".join(struct.pack(">I", f) for f in FLAVORS_KRB5)
                send_record(conn, accepted(xid, struct.pack(">II", 0, len(handle)) + handle + flavors))
            elif prog in (PROG_MOUNT, PROG_NFS) and proc == 0:
                send_record(conn, accepted(xid))
            else:
                log.write(f"OTHER prog={prog} vers={vers} proc={proc} flavor={flavor}\n")
                log.flush()
                send_record(conn, auth_error(xid, AUTH_TOOWEAK))


def main():
    addr, port, log_path, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    listener = socket.create_server((addr, port))
    listener.settimeout(1)
    deadline = time.monotonic() + seconds
    with open(log_path, "a") as log:
        log.write("LISTENING\n")
        log.flush()
        while time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(30)
            threading.Thread(target=serve, args=(conn, log), daemon=True).start()


if __name__ == "__main__":
    main()
