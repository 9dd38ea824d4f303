#!/usr/bin/env python3
"""The layer check (`make lint`): each layer of src/ uses only the layers below it, as the
crate docs' Layers table says (src/lib.rs). A use is any `crate::` path in code, comments
left out: `crate::core::queue::QueueCore`, a `use crate::{a, b::{c}}` group, and a name the
crate re-exports at its root (`crate::Context` is `api`'s), which lib.rs's `pub use` lines
resolve. Prints every upward use with its file and line, and exits 1 if there is one.

    python3 scripts/layers.py [SRC]
"""
import os
import re
import sys

# Bottom to top, as in src/lib.rs's Layers table; the modules of one row may use each other.
LAYERS = [
    {"error", "status", "tracker", "checks", "pod", "util", "census"},
    {"ffi"},
    {"trace"},
    {"core"},
    {"event"},
    {"awaiting"},
    {"record"},
    {"kernel"},
    {"api"},
    {"alloc"},
]
LEVEL = {m: i for i, row in enumerate(LAYERS) for m in row}


def strip_comments(text):
    """The code of a Rust file with its comments blanked (line and block), and string
    literals kept as they are, lines kept in place."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            # A string's text is no path: blanked, its lines kept.
            out.append('""' + "\n" * text.count("\n", i, j + 1))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def reexports(lib_rs):
    """Root names re-exported by lib.rs's `pub use module::...` lines: name -> module."""
    code = strip_comments(open(lib_rs).read())
    names = {}
    for m in re.finditer(r"pub use\s+([a-z_]+)((?:::[A-Za-z_0-9]+)*)(?:::\{([^;]*)\}|::([A-Za-z_0-9]+))?\s*;", code):
        module = m.group(1)
        group = m.group(3)
        if group is not None:
            for item in re.findall(r"([A-Za-z_0-9]+)(?:\s+as\s+([A-Za-z_0-9]+))?", group):
                names[item[1] or item[0]] = module
        else:
            last = (m.group(2) or "").split("::")[-1] if m.group(4) is None else m.group(4)
            if last:
                names[last] = module
    return names


def group_heads(body):
    """The first segments of the items of a `{...}` use group (nested groups flattened)."""
    heads, depth, item = [], 0, ""
    for ch in body + ",":
        if ch == "{":
            depth += 1
            item += ch
        elif ch == "}":
            depth -= 1
            item += ch
        elif ch == "," and depth == 0:
            head = re.match(r"\s*([A-Za-z_0-9]+)", item)
            if head:
                heads.append(head.group(1))
            item = ""
        else:
            item += ch
    return heads


def uses(code):
    """(line, first segment after `crate::`) of every crate path in `code`."""
    found = []
    for m in re.finditer(r"\bcrate::(\{|[A-Za-z_0-9]+)", code):
        line = code.count("\n", 0, m.start()) + 1
        if m.group(1) == "{":
            depth, j = 1, m.end()
            while j < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            found += [(line, head) for head in group_heads(code[m.end():j - 1])]
        else:
            found.append((line, m.group(1)))
    return found


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    names = reexports(os.path.join(src, "lib.rs"))
    bad = 0
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            module = rel.split(os.sep)[0].removesuffix(".rs")
            if module not in LEVEL:
                continue  # lib.rs, guide: the top
            code = strip_comments(open(path).read())
            # A file's unit tests (its `#[cfg(test)] mod`, last by the crate's style) may
            # use the whole crate, as a user does.
            tests = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s", code)
            if tests:
                code = code[: tests.start()]
            for line, head in uses(code):
                target = head if head in LEVEL else names.get(head)
                if target is None or LEVEL[target] <= LEVEL[module]:
                    continue
                bad += 1
                print(f"{path}:{line}: `{module}` uses `crate::{head}` of `{target}`, a layer above it")
    if bad:
        print(f"layers: {bad} upward use(s); each layer uses only the layers below it (src/lib.rs, Layers)")
        return 1
    print("layers: every crate:: use looks down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
