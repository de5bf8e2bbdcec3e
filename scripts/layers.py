#!/usr/bin/env python3
"""Checks the layering of src/: every `crate::` path points to its own layer or
one below, and no files import each other in a circle.

The layers, top to bottom (docs/ARCHITECTURE.md): the binaries and the app
builder; http (REST handlers, MCP, middleware); domain (one function per
operation and the rules); perf (grouped writes and reads, list cache, beside the
domain); store (queries); db, model, config and metrics; error. Prints each
upward reference and each cycle, and exits 1 if there is any.
"""
import os
import re
import sys

RANKS = [
    ("src/main.rs", 6), ("src/lib.rs", 6), ("src/bin/", 6), ("src/testkit/", 6),
    ("src/http/", 5),
    ("src/domain/", 4),
    ("src/perf/", 3),
    ("src/store/", 2),
    ("src/db/", 1), ("src/model/", 1), ("src/config.rs", 1), ("src/metrics.rs", 1),
    ("src/error.rs", 0),
]
TARGETS = {
    "http": 5, "domain": 4, "perf": 3, "store": 2, "db": 1, "model": 1,
    "config": 1, "metrics": 1, "error": 0, "testkit": 6,
}


def rank_of(path):
    for prefix, rank in RANKS:
        if path == prefix or path.startswith(prefix):
            return rank
    return None


def module_file(root, parts):
    """The file of the longest prefix of `crate::parts` that is a module."""
    for n in range(len(parts), 0, -1):
        base = os.path.join(root, "src", *parts[:n])
        for cand in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.isfile(cand):
                return os.path.relpath(cand, root)
    return None


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(root):
    bad = []
    graph = {}
    for base, _, files in os.walk(os.path.join(root, "src")):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.relpath(os.path.join(base, name), root)
            own = rank_of(path)
            if own is None:
                bad.append(f"{path}: not in any layer")
                continue
            text = open(os.path.join(root, path), encoding="utf-8").read()
            for n, line in enumerate(text.splitlines(), 1):
                stripped = line.lstrip()
                if stripped.startswith("//"):
                    continue
                for m in re.finditer(r"\bcrate::([a-z_]+(?:::[a-z_]+)*)", line):
                    target_file = module_file(root, m.group(1).split("::"))
                    if target_file and target_file != path:
                        graph.setdefault(path, set()).add(target_file)
                for m in re.finditer(r"\bcrate::([a-z_]+)", line):
                    target = TARGETS.get(m.group(1))
                    if target is not None and target > own:
                        bad.append(f"{path}:{n}: crate::{m.group(1)} is above this layer")
    for comp in cycles(graph):
        bad.append("cycle: " + ", ".join(comp))
    for b in bad:
        print(b)
    print(f"layers: {len(bad)} upward reference(s) or cycle(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
