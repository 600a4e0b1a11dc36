#!/usr/bin/env python3
"""The agent's rooms and the imports between them; the metastore's contract.

A room is a top-level module of `agent/src` (a file, or a folder with its
files). Every `crate::ROOM` path in a room's code (not its comments, not
its tests) is an arrow from it to ROOM. The rooms must form no cycle: a
room may use those below it, never one that uses it back.

The metastore's contract (`metastore/src/contract`: the operations, their
types, the client) must name nothing of the node: its code's every
`crate::` path goes into `crate::contract`.

    scripts/rooms.py           # print the arrows; exit 1 on a cycle
    scripts/rooms.py --dot     # the graph, for Graphviz
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "agent" / "src"
CONTRACT = ROOT / "metastore" / "src" / "contract"
# The crate root composes the rooms; it is no room.
ROOTS = {"lib"}


def code_of(text):
    """The text without comments, string literals and `#[cfg(test)]` modules."""
    text = re.split(r"#\[cfg\(test\)\]\s*mod\s+tests\b", text)[0]
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def arrows():
    """Each room and the rooms its code names."""
    rooms = {}
    for path in sorted(SRC.rglob("*.rs")):
        rel = path.relative_to(SRC)
        room = rel.parts[0].removesuffix(".rs")
        if room in ROOTS or "tests" in rel.parts or rel.name == "tests.rs":
            continue
        code = code_of(path.read_text())
        names = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", code))
        for group in re.findall(r"\bcrate::\{([^}]*)\}", code):
            names |= {n.strip().split("::")[0] for n in group.split(",") if n.strip()}
        rooms.setdefault(room, set()).update(n for n in names if n != room)
    return rooms


def contract_leaks():
    """Each `crate::` path of the metastore contract's code that leaves it."""
    leaks = []
    for path in sorted(CONTRACT.rglob("*.rs")):
        code = code_of(path.read_text())
        for name in re.findall(r"\bcrate::([a-z_][a-z0-9_]*|\{)", code):
            if name != "contract":
                leaks.append(f"{path.relative_to(ROOT)}: crate::{name}")
        if re.search(r"\bsuper::super\b", code):
            leaks.append(f"{path.relative_to(ROOT)}: super::super")
    return leaks


def cycles(rooms):
    """The strongly connected groups of more than one room (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(rooms.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(rooms):
        if v not in index:
            visit(v)
    return found


def main():
    rooms = arrows()
    if "--dot" in sys.argv:
        print("digraph rooms {")
        for room, uses in sorted(rooms.items()):
            for used in sorted(uses):
                print(f'  "{room}" -> "{used}";')
        print("}")
        return 0
    for room, uses in sorted(rooms.items()):
        print(f"{room} -> {' '.join(sorted(uses)) or '(nothing)'}")
    found = cycles(rooms)
    for group in found:
        print(f"cycle among: {' '.join(group)}", file=sys.stderr)
    leaks = contract_leaks()
    for leak in leaks:
        print(f"the metastore contract names the node: {leak}", file=sys.stderr)
    if not leaks:
        print("metastore contract -> (nothing outside it)")
    return 1 if found or leaks else 0


if __name__ == "__main__":
    sys.exit(main())
