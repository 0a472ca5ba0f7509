#!/usr/bin/env python3
"""The entrances name only what exists (issue 56): every `make TARGET` that README.md,
ARCHITECTURE.md, BENCHMARKS.md, docs/*.md or docs/bench/*.md names is a target of the Makefile, and every
`onsale SUBCOMMAND` a subcommand of the onsale binary (server/src/main.rs). Run by `make test`;
`--self-test` plants a made-up target and subcommand and checks both are caught.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# `make demo`, `make bench-holds STACK=1`; in a code block, also at the start of a line.
MAKE = re.compile(r"`make ([a-z][a-z0-9-]*)")
MAKE_LINE = re.compile(r"^\s*make ([a-z][a-z0-9-]*)", re.M)
# `onsale serve`, `onsale audit verify`; `... --bin onsale -- token`; `target/release/onsale migrate`.
ONSALE = re.compile(r"(?:`onsale |--bin onsale -- |release/onsale )([a-z][a-z-]*)")
ONSALE_LINE = re.compile(r"^\s*onsale ([a-z][a-z-]*)", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.M))


def subcommands() -> set[str]:
    """The variants of `enum Command` in server/src/main.rs, as clap names them (kebab-case)."""
    text = (ROOT / "server/src/main.rs").read_text()
    body = text.split("enum Command {", 1)[1]
    names = set()
    depth = 0
    for line in body.splitlines():
        if depth == 0:
            m = re.match(r"\s{4}([A-Z][A-Za-z]*)\b", line)
            if m:
                names.add(re.sub(r"(?<!^)([A-Z])", r"-\1", m.group(1)).lower())
            if line.strip() == "}":
                break
        depth += line.count("{") - line.count("}")
        depth = max(depth, 0)
    return names | {"help"}


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "ARCHITECTURE.md",
        ROOT / "BENCHMARKS.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "bench").glob("*.md")),
    ]


def unknown(text: str, known_targets: set[str], known_commands: set[str]) -> list[str]:
    """What `text` names that does not exist: in its prose the quoted forms, in its code blocks
    every line that runs `make` or `onsale` too."""
    code = "\n".join(FENCE.findall(text))
    made = MAKE.findall(text) + MAKE_LINE.findall(code)
    run = ONSALE.findall(text) + ONSALE_LINE.findall(code)
    wrong = [f"make {t}" for t in made if t not in known_targets]
    wrong += [f"onsale {c}" for c in run if c not in known_commands]
    return wrong


def main() -> int:
    known_targets, known_commands = targets(), subcommands()
    if "--self-test" in sys.argv:
        planted = "Run `make no-such-target`, then:\n```sh\nmake bench-nothing\nonsale no-such-command\n```\n"
        found = unknown(planted, known_targets, known_commands)
        if found != ["make no-such-target", "make bench-nothing", "onsale no-such-command"]:
            print(f"docs_names self-test: the planted names were not caught: {found}", file=sys.stderr)
            return 1
        if unknown("`make test` and `onsale serve`", known_targets, known_commands):
            print("docs_names self-test: real names refused", file=sys.stderr)
            return 1
        print("docs_names self-test: a made-up target and subcommand are caught")
        return 0
    failures = []
    for doc in documents():
        for name in sorted(set(unknown(doc.read_text(), known_targets, known_commands))):
            failures.append(f"{doc.relative_to(ROOT)} names `{name}`, which does not exist")
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
