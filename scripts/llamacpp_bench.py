#!/usr/bin/env python3
"""llama.cpp's pp/tg throughput on a GGUF model, through llama-cpp-python's
own API, measured as `braid bench` measures Braid: pp = N random tokens
evaluated in one batch on an empty context, tg = N single-token steps, each
after one warm-up run; mean and standard deviation over the repetitions.

  llamacpp_bench.py MODEL [-p 512] [-n 128] [-r 3] [-t 2] [--json FILE]
"""
import argparse
import json
import random
import statistics
import sys
import time

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS threads would spin beside llama.cpp's
import llama_cpp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    ctx = max(a.p, a.n) + 8
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=ctx, n_batch=max(a.p, 1), n_ubatch=max(a.p, 1),
                          n_threads=a.t, n_threads_batch=a.t, verbose=False)
    rng = random.Random(1234)
    n_vocab = llm.n_vocab()

    def pp(n):
        ids = [rng.randrange(n_vocab) for _ in range(n)]
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        return n / (time.perf_counter() - t0)

    def tg(n):
        llm.reset()
        t0 = time.perf_counter()
        for _ in range(n):
            llm.eval([rng.randrange(n_vocab)])
        return n / (time.perf_counter() - t0)

    rows = []
    for name, fn, n in (("pp", pp, a.p), ("tg", tg, a.n)):
        if n == 0:
            continue
        fn(min(n, 32))  # warm-up
        ts = [fn(n) for _ in range(a.r)]
        sd = statistics.stdev(ts) if len(ts) > 1 else 0.0
        rows.append({"test": f"{name}{n}", "avg_ts": statistics.mean(ts), "stddev_ts": sd, "samples_ts": ts})
    info = llama_cpp.llama_print_system_info().decode()
    print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}), {a.t} threads; {info.strip()}")
    for r in rows:
        print(f"| llama.cpp | {r['test']} | {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"engine": "llama.cpp", "version": llama_cpp.__version__, "threads": a.t,
                       "system_info": info, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
