"""Record what the tools print for every sample under every pipeline, to prove a refactor changed nothing.

    python tests/snapshot.py OUT_DIR            # write one file per (sample, pipeline) case
    diff -r BEFORE_DIR AFTER_DIR                # any difference is a behaviour change

For every `samples/*.mlir` and every pipeline below, `lamina-opt FILE -p P --explain` (printed IR,
explain lines, exit code), and for the run pipelines `lamina-run FILE --entry F -p P --seed 0` with
`--stats-json` and `--outputs` for every function whose inputs are small enough (a SHA-256 of each
output's bytes, and the stats without their wall-clock `*_seconds` fields, so two snapshots of the
same behaviour are byte-identical). Only the command-line tools are used, so the script runs unchanged
on both sides of a change to the package's insides. Not a test: `make test` does not run it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")

OPT_PIPELINES = [
    "",
    "cse,canonicalize",
    "fuse-elementwise",
    "fuse-elementwise{reduction-fusion=false max-group-size=3}",
    "propagate-sharding",
    "propagate-sharding,insert-collectives{target=h100-node}",
    "propagate-sharding,insert-collectives{target=h100-cluster bucket=false}",
    "annotate-lifetimes",
    "assign-memory-tiers{target=tiny}",
    "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}",
    "annotate-lifetimes,assign-memory-tiers{target=tiny solver=ilp}",
    "propagate-sharding,insert-collectives,fuse-elementwise,annotate-lifetimes,"
    "assign-memory-tiers{target=h100-node}",
]
RUN_PIPELINES = [
    "",
    "fuse-elementwise",
    "propagate-sharding,insert-collectives{target=h100-node}",
    "fuse-elementwise,annotate-lifetimes,assign-memory-tiers{target=tiny}",
]
MAX_RUN_ELEMENTS = 4_000_000


def _functions(path: str) -> list[tuple[str, int]]:
    """(name, total input elements) of every function in a sample, read from its text."""
    text = open(path).read()
    out = []
    for m in re.finditer(r"func\.func @(\w+)\((.*?)\)\s*(->|\{)", text, re.S):
        total = 0
        for shape in re.findall(r"tensor<([0-9x]*)(?:f|i|b)", m.group(2)):
            dims = [int(d) for d in shape.split("x") if d]
            total += int(np.prod(dims)) if dims else 1
        out.append((m.group(1), total))
    return out


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_") or "none"


def _opt_case(path: str, pipeline: str) -> tuple[str, str]:
    cmd = [os.path.join(BIN, "lamina-opt"), path, "--explain"] + (["-p", pipeline] if pipeline else [])
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    key = f"opt__{os.path.basename(path)}__{_slug(pipeline)}"
    return key, f"$ {' '.join(cmd[1:])}\nrc={r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}"


def _without_timings(stats: object) -> object:
    """`stats` without its wall-clock fields (`compile_seconds`, `run_seconds_all`, ... at any
    depth): they differ from run to run, and a snapshot records behaviour."""
    if isinstance(stats, dict):
        return {k: _without_timings(v) for k, v in stats.items()
                if not (k.endswith("_seconds") or "_seconds_" in k)}
    if isinstance(stats, list):
        return [_without_timings(v) for v in stats]
    return stats


def _run_case(path: str, func: str, pipeline: str) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        outs, stats = os.path.join(tmp, "out.npz"), os.path.join(tmp, "stats.json")
        cmd = [os.path.join(BIN, "lamina-run"), path, "--entry", func, "--seed", "0",
               "--outputs", outs, "--stats-json", stats] + (["-p", pipeline] if pipeline else [])
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        lines = [f"$ {' '.join(cmd[1:])}", f"rc={r.returncode}", "--- stdout", r.stdout,
                 "--- stderr", r.stderr]
        if os.path.exists(outs):
            with np.load(outs, allow_pickle=False) as data:
                for k in sorted(data.files):
                    a = data[k]
                    lines.append(f"{k} {a.dtype} {list(a.shape)} "
                                 f"{hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}")
        if os.path.exists(stats):
            s = _without_timings(json.load(open(stats)))
            lines.append(json.dumps(s, indent=1, sort_keys=True))
    key = f"run__{os.path.basename(path)}__{func}__{_slug(pipeline)}"
    return key, "\n".join(lines).replace(tmp, "TMP") + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description="Record every sample x pipeline's output.")
    ap.add_argument("out", help="directory to write the cases to")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    samples = sorted(glob.glob(os.path.join(ROOT, "samples", "*.mlir")))
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for path in samples:
            for p in OPT_PIPELINES:
                jobs.append(pool.submit(_opt_case, os.path.relpath(path, ROOT), p))
            for func, n in _functions(path):
                if n > MAX_RUN_ELEMENTS:
                    continue
                for p in RUN_PIPELINES:
                    jobs.append(pool.submit(_run_case, os.path.relpath(path, ROOT), func, p))
        for j in jobs:
            key, text = j.result()
            with open(os.path.join(args.out, key + ".txt"), "w") as f:
                f.write(text)
    print(f"{len(jobs)} cases written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
