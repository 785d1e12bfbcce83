#!/usr/bin/env python3
"""Where the operator's peak heap goes, from a heaptrack profile.

Usage: scripts/heap-breakdown.py PROFILE.zst   (needs heaptrack_print)

Groups every allocation live at the peak by what made it: the reflector
caches (split into the cached objects' own structs, their maps, their strings
and vectors, and the caches' hash tables), the operator's own indexes, the
HTTP bodies in flight, and the rest.
"""
import collections
import subprocess
import sys


def category(stack: str) -> str:
    if "apply_watcher_event" in stack:
        leaf = stack.rsplit(";", 12)[-12:]
        leaf = ";".join(leaf)
        if "clone_subtree" in leaf or "new_leaf" in leaf or "new_internal" in leaf:
            return "caches: label and annotation maps (BTreeMap nodes)"
        if "hash_map.rs" in leaf or "reserve_rehash" in leaf:
            return "caches: hash tables"
        if "to_vec" in leaf or "string.rs" in leaf or "slice.rs" in leaf:
            return "caches: strings and vectors"
        return "caches: the objects' structs (Arc boxes)"
    if "labelled.rs" in stack:
        return "index: children by instance label"
    if "claims" in stack:
        return "index: host claims"
    if "foreign.rs" in stack:
        return "index: foreign names"
    if "memory.rs" in stack:
        return "memory record"
    if "HeardBody" in stack or "hyper" in stack or "h2" in stack:
        return "HTTP: bodies and connections in flight"
    if "scheduler.rs" in stack or "schedule_message" in stack:
        return "controller: scheduler"
    return "other"


def main() -> None:
    profile = sys.argv[1]
    folded = subprocess.run(
        ["heaptrack_print", "-f", profile, "--print-flamegraph", "/dev/stdout",
         "--flamegraph-cost-type", "peak", "--print-peaks", "0",
         "--print-allocators", "0", "--print-temporary", "0", "--print-leaks", "0"],
        # No --print-histogram: its argument is a path, and "0" left a file
        # named 0 in the working directory.
        check=True, capture_output=True, text=True).stdout
    by = collections.Counter()
    for line in folded.splitlines():
        stack, _, cost = line.rpartition(" ")
        if cost.isdigit():
            by[category(stack)] += int(cost)
    total = sum(by.values())
    if total == 0:
        sys.exit(f"heap-breakdown: no allocation in {profile} (did the process run to its end?)")
    print(f"peak heap {total / 1e6:.2f} MB")
    for what, bytes_ in by.most_common():
        print(f"  {bytes_ / 1e6:7.2f} MB  {100 * bytes_ / total:5.1f}%  {what}")


if __name__ == "__main__":
    main()
