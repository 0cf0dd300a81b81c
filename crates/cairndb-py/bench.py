#!/usr/bin/env python3
"""Put and get of 100-byte values through cairndb and, if it is
installed, plyvel, in one run, same keys and values, default options
(what `import cairndb as plyvel` gives a plyvel program).

    python bench.py [--n 200000] [--dir /path/on/the/disk/to/measure]

Phases per engine: fillseq (keys in order), fillrandom (a fresh database,
keys in random order), readrandom (every key once, in random order, after
fillrandom), readmissing, readseq (one full iterator pass), then
readrandom-c and readseq-c again after compact_range() (all data in
tables). Keys are 16
bytes, values 100 random (incompressible) bytes; writes are not synced.
Figures are thousands of operations per second; the ratio column is
cairndb / plyvel. Absolute figures on a shared machine are noise; the
ratios within one run are the result.
"""

import argparse
import importlib
import os
import random
import shutil
import tempfile
import time


def phases(mod, base, keys, shuffled, value):
    out = {}

    def timed(name, n, fn):
        t = time.perf_counter()
        fn()
        out[name] = n / (time.perf_counter() - t) / 1000

    path = os.path.join(base, mod.__name__ + "-seq")
    db = mod.DB(path, create_if_missing=True)
    timed("fillseq", len(keys), lambda: [db.put(k, value) for k in keys])
    db.close()

    path = os.path.join(base, mod.__name__ + "-random")
    db = mod.DB(path, create_if_missing=True)
    timed("fillrandom", len(keys), lambda: [db.put(k, value) for k in shuffled])

    def readrandom():
        get = db.get
        for k in shuffled:
            if get(k) is None:
                raise AssertionError(k)

    timed("readrandom", len(keys), readrandom)
    missing = [k + b"x" for k in shuffled[: len(shuffled) // 4]]
    timed("readmissing", len(missing), lambda: [db.get(k) for k in missing])

    def readseq():
        n = sum(1 for _ in db.iterator())
        assert n == len(keys), n

    timed("readseq", len(keys), readseq)
    # The same reads once everything is in tables: cairndb's default
    # memtable (64 MiB) holds a whole small run, LevelDB's (4 MiB) does not.
    db.compact_range()
    timed("readrandom-c", len(keys), readrandom)
    timed("readseq-c", len(keys), readseq)
    db.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    rnd = random.Random(42)
    keys = [b"%016d" % i for i in range(args.n)]
    shuffled = keys[:]
    rnd.shuffle(shuffled)
    value = bytes(rnd.getrandbits(8) for _ in range(100))

    mods = [importlib.import_module("cairndb")]
    try:
        mods.append(importlib.import_module("plyvel"))
    except ImportError:
        print("plyvel is not installed: cairndb's figures only")

    base = tempfile.mkdtemp(dir=args.dir, prefix="cairndb-bench-")
    try:
        results = {m.__name__: phases(m, base, keys, shuffled, value) for m in mods}
    finally:
        shutil.rmtree(base, ignore_errors=True)

    names = list(results)
    print(f"n={args.n}, 16-byte keys, 100-byte values; thousands of ops/s")
    header = f"{'phase':<12}" + "".join(f"{n:>10}" for n in names)
    if len(names) == 2:
        header += f"{'ratio':>8}"
    print(header)
    for phase in results[names[0]]:
        row = f"{phase:<12}" + "".join(f"{results[n][phase]:>10.1f}" for n in names)
        if len(names) == 2:
            row += f"{results[names[0]][phase] / results[names[1]][phase]:>8.2f}"
        print(row)


if __name__ == "__main__":
    main()
