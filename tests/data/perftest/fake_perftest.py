"""A stand-in for ib_write_bw / ib_write_lat on machines without an RDMA device.

The tests install it as small shell wrappers named after the tools:

    #!/bin/sh
    exec <python> fake_perftest.py --fake-report <report file> [--fake-...] -- "$@"

It behaves like perftest where the harness depends on it: the server (no host argument)
listens on the -p TCP port and accepts one connection, the client connects to <host>:<-p>
once and fails like perftest ("Couldn't connect to <host>:<port>", exit 1) when nothing
listens; `--help` lists --out_json unless --fake-no-json. At the end each side writes the
report: the file given by --out_json_file= (with --out_json), else the text report on
stdout, with the MsgSize / #bytes replaced by the -s value. No RDMA happens.

Fault injection: --fake-fail ROLE prints a perftest-shaped error and exits 1 on that side;
--fake-hang ROLE never finishes on that side (the server after its client is done); --fake-listen-delay S waits before listening.
"""

import argparse
import os
import re
import socket
import sys
import time

# perftest options that take no value (the rest of the single-dash ones take one).
NO_VALUE = {"-F", "-a", "-b", "-N", "-O", "-R", "-z", "-H", "-U", "-C", "-V", "-h"}


def fake_options(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--fake-report", required=True)
    p.add_argument("--fake-text")
    p.add_argument("--fake-no-json", action="store_true")
    p.add_argument("--fake-fail", choices=("server", "client"))
    p.add_argument("--fake-hang", choices=("server", "client"))
    p.add_argument("--fake-listen-delay", type=float, default=0.0)
    p.add_argument("--fake-log")
    split = argv.index("--")
    return p.parse_args(argv[:split]), argv[split + 1:]


def tool_options(args):
    opts, positional, i = {}, [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            key, _, value = a.partition("=")
            opts[key] = value
            i += 1
        elif a.startswith("-") and len(a) == 2:
            if a in NO_VALUE:
                opts[a] = ""
                i += 1
            else:
                opts[a] = args[i + 1]
                i += 2
        else:
            positional.append(a)
            i += 1
    return opts, positional


def main():
    fake, args = fake_options(sys.argv[1:])
    if "--help" in args or "-h" in args:
        print("Usage:\n  ib_write_bw            start a server and wait for connection")
        print("  -D, --duration  Run test for a customized period of seconds.")
        if not fake.fake_no_json:
            print("      --out_json  Save the report in a json file")
            print("      --out_json_file=<file>  Name of the report json file.")
        return 1  # perftest exits non-zero after --help
    opts, positional = tool_options(args)
    role = "client" if positional else "server"
    if fake.fake_log:
        with open(fake.fake_log, "a") as log:
            log.write(f"{role} {os.getpid()} " + " ".join(args) + "\n")
    port = int(opts.get("-p", 18515))
    if fake.fake_fail == role:
        print(" Couldn't get context for the device", file=sys.stderr)
        print(" Unable to init the socket connection", file=sys.stderr)
        return 1
    if role == "server":
        time.sleep(fake.fake_listen_delay)
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("", port))
        srv.listen(1)
        print("\n************************************\n* Waiting for client to connect... *\n"
              "************************************", flush=True)
        conn, _ = srv.accept()
        srv.close()
        conn.recv(16)
        conn.sendall(b"done")
        conn.close()
        if fake.fake_hang == "server":  # the client is done; this server never reports
            time.sleep(3600)
    else:
        try:
            conn = socket.create_connection((positional[0], port), timeout=10)
        except OSError:
            print(f"Couldn't connect to {positional[0]}:{port}", file=sys.stderr)
            print(" Unable to init the socket connection", file=sys.stderr)
            return 1
        conn.sendall(b"go")
        if fake.fake_hang == "client":
            time.sleep(3600)
        conn.recv(16)
        conn.close()
    size = opts.get("-s", "65536")
    if "--out_json" in opts and not fake.fake_no_json:
        with open(fake.fake_report) as f:
            report = re.sub(r'(MsgSize"?\s*:\s*)\d+', lambda m: m.group(1) + size, f.read())
        with open(opts.get("--out_json_file") or "perftest_out.json", "w") as f:
            f.write(report)
    if fake.fake_text:
        with open(fake.fake_text) as f:
            text = f.read()
        # The result row's first column is #bytes.
        text = re.sub(r"(?m)^( )(\d+)(\s+\d+\s)", lambda m: m.group(1) + size.ljust(len(m.group(2)))
                      + m.group(3), text)
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
