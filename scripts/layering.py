#!/usr/bin/env python3
"""The layering check (`make test`), beside the crate rules scripts/test.sh asks `cargo tree`:
- every table has one owner crate, named in migrations/OWNERS, and only that crate's code names
  it in SQL (another crate reaches it through the owner's API; the integration tests, tests/, may
  read any table: they check what the crates wrote);
- ARCHITECTURE.md's crate graph is cargo's;
- no module of a crate imports back into one that imports it.

    scripts/layering.py            check the workspace; exit 1 listing each crossing
    scripts/layering.py --self-test  plant a crossing and a module cycle in a copy of the tree
                                     (of HEAD) and expect both found
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A table named after a keyword that introduces it in a statement.
STATEMENT = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|TRUNCATE|EXISTS)\s+(?:ONLY\s+|IF\s+(?:NOT\s+)?EXISTS\s+)?([a-z_][a-z0-9_]*)\b"
)
CREATED = re.compile(r"CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)", re.I)


def owners():
    """migrations/OWNERS: `table crate-directory`, one per line, `#` comments; and the
    crossings not moved yet, `cross path table`, each of which must still be there."""
    table_owner, known = {}, set()
    with open(os.path.join(ROOT, "migrations", "OWNERS")) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if parts[0] == "cross" and len(parts) == 3:
                known.add((parts[1], parts[2]))
                continue
            if len(parts) != 2 or parts[0] in table_owner:
                sys.exit(f"migrations/OWNERS:{n}: expected one `table crate` line per table: {line!r}")
            table_owner[parts[0]] = parts[1]
    return table_owner, known


def created_tables():
    tables = set()
    mig = os.path.join(ROOT, "migrations")
    for name in sorted(os.listdir(mig)):
        if name.endswith(".sql"):
            with open(os.path.join(mig, name)) as f:
                tables.update(CREATED.findall(f.read()))
    return tables


def literals(src):
    """The string literals of Rust source (plain, byte and raw), outside comments."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 70]) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = len(re.match(r"r(#*)", src[i:]).group(1))
            start = i + 2 + hashes
            end = src.find('"' + "#" * hashes, start)
            out.append(src[start:end])
            i = end + 1 + hashes
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(src[i + 1:j])
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a): skip the char literal whole.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:i + 12])
            i += len(m.group(0)) if m else 1
        else:
            i += 1
    return out


def sources(root):
    """(path, code) of every tracked Rust file under `root`, each cut at its unit-test module:
    a crate's tests may look at what its code wrote anywhere, and import what they test."""
    files = subprocess.run(["git", "ls-files", "*.rs"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    for path in files:
        with open(os.path.join(root, path)) as f:
            src = f.read()
        cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", src)
        yield path, src[:cut.start()] if cut else src


def crossings(root, table_owner):
    found = []
    for path, src in sources(root):
        crate = path.split("/", 1)[0]
        if crate == "tests" or "/tests/" in path or "/benches/" in path:
            continue
        for lit in literals(src):
            for table in sorted(set(STATEMENT.findall(lit))):
                owner = table_owner.get(table)
                if owner and owner != crate:
                    found.append((path, table, f"{path}: `{table}` belongs to {owner}/ ({' '.join(lit.split())[:80]!r})"))
    return found


def drawn_graph():
    """The crate graph ARCHITECTURE.md draws: {crate directory: set of its onsale dependencies}."""
    with open(os.path.join(ROOT, "ARCHITECTURE.md")) as f:
        text = f.read()
    block = text.split("## The crates", 1)[1].split("```", 2)[1]
    graph, current, arrows = {}, None, False
    for line in block.splitlines():
        line = re.sub(r"\[.*?\]|\(.*?\)", "", line)
        if "─►" in line:
            arrows = True
            name, deps = line.split("─►", 1)
            current = name.split()[-1]
            graph[current] = set()
        elif not arrows:
            # The crates with no onsale dependency, named before the first arrow.
            for word in line.split():
                if os.path.isfile(os.path.join(ROOT, word, "Cargo.toml")):
                    graph[word] = set()
            continue
        elif current is None or not line.strip():
            continue
        else:
            deps = line
        if current is not None:
            graph[current].update(d.strip() for d in deps.split(",") if d.strip())
        if not line.rstrip().endswith(","):
            current = None
    # `tests ─► server and the crates it builds` is prose, not a list.
    graph.pop("tests", None)
    return graph


def cargo_graph(crates):
    """{crate directory: its onsale dependencies' directories}, as `cargo tree --depth 1` has them."""
    graph = {}
    for crate in crates:
        out = subprocess.run(
            ["cargo", "tree", "--manifest-path", os.path.join(ROOT, crate, "Cargo.toml"), "-e", "normal", "--depth", "1", "--prefix", "none"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.splitlines()
        deps = set()
        for line in out[1:]:
            m = re.search(r"\((" + re.escape(ROOT) + r")/([^)/]+)\)", line)
            if m:
                deps.add(m.group(2))
        graph[crate] = deps
    return graph


def module_of(parts):
    """`a::b` for crate/src/a/b.rs or crate/src/a/b/mod.rs; None for the crate's root."""
    rest = parts[2:]
    rest[-1] = rest[-1].removesuffix(".rs")
    if rest[-1] == "mod":
        rest = rest[:-1]
    return None if rest in (["lib"], ["main"]) else "::".join(rest)


def module_cycles(root):
    """Cycles among each crate's modules, nested ones too (tests aside): a module must not
    import back into one that imports it. A module and the submodules it declares are one
    unit (a child may use its parent's items: `super` is what it belongs to), so an import of
    one's own ancestor is no edge; between siblings, and across units, dependencies run one way.
    An import is a path from `crate::`, `super::` or `self::`, or from a child module's name."""
    files = {}
    for path, src in sources(root):
        parts = path.split("/")
        if len(parts) < 3 or parts[1] != "src":
            continue
        module = module_of(parts)
        if module is not None:
            files[(parts[0], module)] = re.sub(r"//[^\n]*", "", src)
    graph = {}
    for (crate, module), src in files.items():
        known = {m for c, m in files if c == crate}
        here = module.split("::")
        deps = graph.setdefault((crate, module), set())
        for head, prefix, tail in re.findall(r"\b(crate|super|self|\w+)::((?:\w+::)*)(\w+|\*|\{[^}]*\})", src):
            if head == "crate":
                base = []
            elif head == "super":
                base = here[:-1]
            elif head == "self":
                base = here
            elif "::".join(here + [head]) in known:
                base = here + [head]
            else:
                continue
            items = [tail] if not tail.startswith("{") else re.findall(r"(?:^|,)\s*([\w:]+)", tail[1:])
            for item in items:
                segments = base + [s for s in (prefix + item).split("::") if s and s != "self"]
                target = next(("::".join(segments[:n]) for n in range(len(segments), 0, -1) if "::".join(segments[:n]) in known), None)
                if target and target != module and not module.startswith(target + "::"):
                    deps.add((crate, target))
    cycles, done = [], set()

    def visit(node, stack):
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in done:
            return
        for dep in sorted(graph.get(node, ())):
            if dep in graph:
                visit(dep, stack + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return [" -> ".join(f"{c}::{m}" if i == 0 else m for i, (c, m) in enumerate(cycle)) for cycle in cycles]


def main():
    table_owner, known = owners()
    cycles = module_cycles(ROOT)
    if cycles:
        sys.exit("modules that import back into one that imports them:\n  " + "\n  ".join(cycles))
    drawn = drawn_graph()
    actual = cargo_graph(sorted(drawn))
    wrong = [f"  {c}: drawn {sorted(drawn[c])}, cargo tree {sorted(actual[c])}" for c in sorted(drawn) if drawn[c] != actual[c]]
    if wrong:
        sys.exit("ARCHITECTURE.md's crate graph is not cargo's:\n" + "\n".join(wrong))
    missing = sorted(created_tables() - set(table_owner))
    if missing:
        sys.exit(f"tables with no owner in migrations/OWNERS: {', '.join(missing)}")
    stale = sorted(set(table_owner) - created_tables())
    if stale:
        sys.exit(f"migrations/OWNERS names tables no migration creates: {', '.join(stale)}")
    if sys.argv[1:] == ["--self-test"]:
        # The check must see a crossing planted in a copy of the tree.
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["git", "worktree", "add", "--detach", "-q", tmp], cwd=ROOT, check=True)
            try:
                with open(os.path.join(tmp, "query-side/src/lib.rs"), "a") as f:
                    f.write('\nconst _PLANTED: &str = "SELECT count(*) FROM events";\n')
                # And a module importing back into one that imports it.
                protocol = os.path.join(tmp, "command-side/src/protocol.rs")
                with open(protocol) as f:
                    text = f.read()
                with open(protocol, "w") as f:
                    f.write("use crate::owner::Shows;\n" + text)
                # And two sibling modules importing each other (the owner's actor and registry).
                actor = os.path.join(tmp, "command-side/src/owner/actor.rs")
                with open(actor) as f:
                    text = f.read()
                with open(actor, "w") as f:
                    f.write("use super::registry::Shows;\n" + text)
                subprocess.run(["git", "add", "-A"], cwd=tmp, check=True)
                planted = crossings(tmp, table_owner)
                cycles = module_cycles(tmp)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", tmp], cwd=ROOT, check=True)
        if not any(p[:2] == ("query-side/src/lib.rs", "events") for p in planted):
            sys.exit("the layering check did not see a planted crossing")
        if not any("protocol" in c and "owner" in c for c in cycles):
            sys.exit("the layering check did not see a planted module cycle")
        if not any("owner::actor" in c and "owner::registry" in c for c in cycles):
            sys.exit("the layering check did not see a planted cycle between sibling modules")
        print("layering self-test: a planted crossing and planted module cycles (across the crate, between siblings) are refused")
        return
    found = crossings(ROOT, table_owner)
    new = [line for path, table, line in found if (path, table) not in known]
    gone = sorted(known - {(path, table) for path, table, _ in found})
    if new:
        print("SQL that crosses crate lines (each table's statements belong to its owner, migrations/OWNERS):", file=sys.stderr)
        for line in new:
            print("  " + line, file=sys.stderr)
    if gone:
        print("crossings listed in migrations/OWNERS that are gone (take them off the list):", file=sys.stderr)
        for path, table in gone:
            print(f"  cross {path} {table}", file=sys.stderr)
    if new or gone:
        sys.exit(1)
    print(f"layering: {len(table_owner)} tables, each named only by its owner crate but for {len(known)} listed crossings")


if __name__ == "__main__":
    main()
