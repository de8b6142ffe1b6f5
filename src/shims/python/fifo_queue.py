"""A team's own queue, in miniature: the reference for noisylab's protocol
(docs/your-queue.md), in Python's standard library alone.

It is a plain FIFO queue with N worker threads. Its enqueue endpoint takes
noisylab's jobs (POST, one JSON job); each worker takes the oldest job,
reports its start to noisylab's collector, holds for the job's hold (a
stand-in for the work), and reports its end.

    python3 fifo_queue.py --workers 20 --port 8000
    noisylab run lab/article.toml --strategy "Shared FIFO" \\
        --backend http://127.0.0.1:8000/jobs

It prints the URL it listens on. With --until-stdin-closes it exits when
its standard input closes (tests run it so).
"""

import argparse
import http.client
import json
import queue
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

jobs = queue.Queue()


def report(conns, job, event):
    """The handler's two calls: POST {report}/start, then {report}/end."""
    url = urllib.parse.urlsplit(job["report"])
    conn = conns.get(url.netloc) or http.client.HTTPConnection(url.netloc, timeout=10)
    conns[url.netloc] = conn
    body = json.dumps({k: job[k] for k in ("run", "job", "attempt", "secret")})
    try:
        conn.request("POST", "/" + event, body, {"content-type": "application/json"})
        conn.getresponse().read()
    except (OSError, http.client.HTTPException):
        conns.pop(url.netloc, None).close()
        raise


def worker():
    conns = {}
    while True:
        job = jobs.get()
        report(conns, job, "start")
        time.sleep(job["hold_ms"] / 1000)
        report(conns, job, "end")


class Enqueue(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep the poster's connections alive

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            jobs.put(json.loads(body))
            status = 202
        except ValueError:
            status = 400
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--until-stdin-closes", action="store_true")
    args = ap.parse_args()
    for _ in range(args.workers):
        threading.Thread(target=worker, daemon=True).start()
    ThreadingHTTPServer.request_queue_size = 128  # a burst opens many connections
    server = ThreadingHTTPServer((args.host, args.port), Enqueue)
    server.daemon_threads = True
    print(f"listening on http://{args.host}:{server.server_address[1]}/jobs", flush=True)
    if args.until_stdin_closes:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        sys.stdin.read()
    else:
        server.serve_forever()


if __name__ == "__main__":
    main()
