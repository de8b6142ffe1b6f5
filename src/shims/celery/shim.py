"""noisylab's protocol (docs/your-queue.md) on Celery with a Redis broker,
with Celery's defaults: an enqueue endpoint that sends each job as a Celery
task, and a Celery worker (its default prefork pool, concurrency N) whose
task reports the job's start, holds for its hold, and reports its end.

    python3 -m venv .venv && .venv/bin/pip install -r src/shims/celery/requirements.txt
    .venv/bin/python src/shims/celery/shim.py --redis redis://127.0.0.1:6379/0 --workers 20 --port 8000
    noisylab run lab/article.toml --strategy "Shared FIFO" --backend http://127.0.0.1:8000/jobs

It starts the worker, waits until it answers, and prints the URL it listens
on. With --until-stdin-closes it exits when its standard input closes.
"""

import argparse
import ctypes
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from celery import Celery

app = Celery("shim", broker=os.environ.get("NOISYLAB_REDIS", "redis://127.0.0.1:6379/0"))
local = threading.local()


def report(job, event):
    """The handler's two calls: POST {report}/start, then {report}/end."""
    url = urllib.parse.urlsplit(job["report"])
    conns = local.__dict__.setdefault("conns", {})
    conn = conns.get(url.netloc) or http.client.HTTPConnection(url.netloc, timeout=10)
    conns[url.netloc] = conn
    body = json.dumps({k: job[k] for k in ("run", "job", "attempt", "secret")})
    try:
        conn.request("POST", "/" + event, body, {"content-type": "application/json"})
        conn.getresponse().read()
    except (OSError, http.client.HTTPException):
        conns.pop(url.netloc).close()
        raise


@app.task(name="noisylab.job")
def job_task(job):
    report(job, "start")
    time.sleep(job["hold_ms"] / 1000)
    report(job, "end")


class Enqueue(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep the poster's connections alive

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            job_task.delay(json.loads(body))
            status = 202
        except ValueError:
            status = 400
        except Exception:  # the broker is away
            status = 503
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def die_with_parent():
    """The worker ends with this process, however it ends (Linux)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--until-stdin-closes", action="store_true")
    args = ap.parse_args()
    os.environ["NOISYLAB_REDIS"] = args.redis
    app.conf.broker_url = args.redis
    # The worker's temporary files (its pool's folder, which a worker that
    # cannot shut down cleanly leaves behind) go in a folder this process
    # removes once the worker is gone; a `kill` of this process ends it
    # through that cleanup too.
    tmp = tempfile.mkdtemp(prefix="noisylab-celery-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "shim", "worker",
         "--concurrency", str(args.workers), "--loglevel", "WARNING"],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        env={**os.environ, "TMPDIR": tmp},
        stdout=sys.stderr,  # this process's standard output says only its URL
        preexec_fn=die_with_parent,
    )
    try:
        ready_by = time.monotonic() + 60
        while not app.control.ping(timeout=0.5):
            if worker.poll() is not None:
                sys.exit(f"the Celery worker exited ({worker.returncode})")
            if time.monotonic() > ready_by:
                sys.exit("the Celery worker did not answer within 60 s")
        ThreadingHTTPServer.request_queue_size = 128  # a burst opens many connections
        server = ThreadingHTTPServer(("127.0.0.1", args.port), Enqueue)
        server.daemon_threads = True
        print(f"listening on http://127.0.0.1:{server.server_address[1]}/jobs", flush=True)
        if args.until_stdin_closes:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            sys.stdin.read()
        else:
            server.serve_forever()
    finally:
        worker.send_signal(signal.SIGQUIT)  # a cold shutdown: the run is over
        try:
            worker.wait(timeout=5)
        except subprocess.TimeoutExpired:  # its broker is gone too
            worker.kill()
            worker.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
