#!/usr/bin/env python3
"""Start llama.cpp's HTTP server (the `xllamacpp` wheel) on loopback and keep it running.

Takes the usual llama-server options (-m, --alias, --host, --port, -t, -c, -np,
--chat-template-file), prints one line `listening on http://HOST:PORT` to stdout once the
server accepts connections, and runs until it gets SIGTERM or SIGINT (or its parent closes
stdin when --exit-on-stdin-eof is given).

Runs with the Python of the venv that `cargo xtask setup` (step "llama.cpp server") makes under
.cache/llama/venv; `pattern_core::local_server` embeds this file and runs it with `python -c`, and
it can be run by hand as `.cache/llama/venv/bin/python crates/pattern_core/assets/llama_server.py`.
It must never bind anything but the host it is given (default 127.0.0.1) and never download
anything: the model is a local file.
"""

import argparse
import os
import signal
import sys
import threading


def parse_args(argv):
    p = argparse.ArgumentParser(description="Start llama.cpp's HTTP server on loopback.")
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    p.add_argument("--alias", default=None, help="model name the API reports")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("-c", "--ctx-size", type=int, default=8192)
    p.add_argument("-np", "--parallel", type=int, default=1)
    p.add_argument("--chat-template-file", default=None, help="Jinja chat template to use")
    p.add_argument("--exit-on-stdin-eof", action="store_true",
                   help="stop when stdin closes (the parent died)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if not os.path.isfile(args.model):
        print(f"model file not found: {args.model}", file=sys.stderr)
        return 2
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.use_jinja = True
    params.warmup = False
    if args.chat_template_file:
        with open(args.chat_template_file, encoding="utf-8") as f:
            params.chat_template = f.read()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_on_stdin_eof:
        def watch_stdin():
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            finally:
                stop.set()
        threading.Thread(target=watch_stdin, daemon=True).start()

    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
