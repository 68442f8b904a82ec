"""The docs name commands that exist (issue 32). Every `python -m MODULE ...` and `make TARGET ...` written in
README.md, docs/*.md and examples/*/README.md -- in a fenced code block (one line, or lines joined by a trailing
backslash) or in an inline code span -- is checked against the code:

* the module is importable (importlib.util.find_spec);
* every `--flag` written after it, up to the end of that code line or span (or the next command: `&&`, `;`, `|`,
  a `#` comment), is in the help of that command: `python -m MODULE [SUBCOMMAND] --help`, run once per command
  in a subprocess (a help that fails is a failure). For `python -m pytest` the help is taken with the command's
  paths, so that their conftest options count;
* every `make TARGET` is a target of the Makefile, and every `VAR=value` given to make is a variable it reads.

No training: the whole file runs the help of a few dozen commands, in parallel.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*/README.md")])

PY_CMD = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
MAKE_CMD = re.compile(r"(?<![\w./$-])(make)(?=\s|$)")
FLAG = re.compile(r"(?<![\w=-])--[A-Za-z][\w-]*")
SEPARATORS = re.compile(r"&&|\|\||;|\s\|\s|\s#\s|\s#$|\)\s|\)$")
SPAN = re.compile(r"`((?:[^`\n]|\n(?![ \t]*\n))+)`")        # an inline code span, never across a blank line


def segments(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every code line (a fenced block's lines, continuations joined) and inline code span."""
    out, prose, fenced, lines = [], [], False, path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
        elif fenced:
            start, text = i + 1, line
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i]
                prose.append("")
            out.append((start, text))
            prose.append("")
        else:
            prose.append(line)
        i += 1
    text = "\n".join(prose)
    for m in SPAN.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1).replace("\n", " ")))
    return out


def commands(regex: re.Pattern) -> list[tuple[str, int, str, str]]:
    """(file, line, name, the command's text after its name up to the next command or separator)."""
    found = []
    for path in DOCS:
        for line, text in segments(path):
            hits = list(regex.finditer(text))
            for k, m in enumerate(hits):
                end = hits[k + 1].start() if k + 1 < len(hits) else len(text)
                rest = text[m.end():end]
                cut = SEPARATORS.search(rest)
                found.append((str(path.relative_to(ROOT)), line, m.group(1) if regex is PY_CMD else "make",
                              rest[:cut.start()] if cut else rest))
    return found


PY = [(f, ln, mod.rstrip("."), rest) for f, ln, mod, rest in commands(PY_CMD)]
MAKE = commands(MAKE_CMD)


# Runs each command's help in this helper process: `runpy.run_module(MODULE, run_name="__main__")` with argv
# [MODULE, (SUBCOMMAND,) "--help"] is what `python -m MODULE (SUBCOMMAND) --help` runs, minus a fresh interpreter
# and a fresh torch import for each of a few dozen commands (seconds each on 2 cores). A subcommand's help is
# taken when the command's first word is one of the subcommands its usage line lists ({build,calibrate,...}).
HELPER = r"""
import contextlib, io, json, re, runpy, sys
def run(argv):
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            if argv[0] == "pytest":
                import pytest
                code = pytest.main([*argv[1:], "--help", "-p", "no:cacheprovider"])
            else:
                sys.argv = [argv[0], *argv[1:], "--help"]
                runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:
            print(f"{type(e).__name__}: {e}")
            code = 1
    return int(code), out.getvalue()
result = {}
for module, words in json.loads(sys.argv[1]):
    key = (module, *words) if module == "pytest" else (module,)
    result[json.dumps(key)] = code, text = run(list(key))
    usage = text.split("\n\n")[0]
    subs = {s for block in re.findall(r"\{([\w,-]+)\}", usage) for s in block.split(",")}
    for w in words if module != "pytest" else ():
        if w in subs:
            result[json.dumps((module, w))] = run([module, w])
sys.__stdout__.write(json.dumps(result))
"""


def help_key(module: str, rest: str, texts: dict) -> tuple[str, ...]:
    """The argv (after -m) whose --help lists this command's flags: the subcommand's if it has one."""
    words = positionals(module, rest)
    if module == "pytest":
        return (module, *words)
    return (module, words[0]) if words and (module, words[0]) in texts else (module,)


def positionals(module: str, rest: str) -> list[str]:
    words = [w.strip("[]") for w in rest.split() if not w.startswith(("-", "[-"))]
    if module == "pytest":
        return [w for w in words if (ROOT / w).exists()]
    return words[:1]


def helps() -> dict[tuple[str, ...], tuple[int, str]]:
    """The help of every command the docs give flags to, in two helper processes (one per core)."""
    wanted: dict[str, set] = {}
    for _, _, mod, rest in PY:
        if FLAG.search(rest) and importlib.util.find_spec(mod):
            key = "pytest " + " ".join(positionals(mod, rest)) if mod == "pytest" else mod
            wanted.setdefault(key, set()).update(positionals(mod, rest) if mod != "pytest" else ())
    requests = [(k.split()[0], k.split()[1:] if k.startswith("pytest") else sorted(v)) for k, v in wanted.items()]
    env = {**os.environ, "RLHF_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

    def run(batch):
        r = subprocess.run([sys.executable, "-c", HELPER, json.dumps(batch)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        return {tuple(json.loads(k)): tuple(v) for k, v in json.loads(r.stdout).items()}

    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(run, [requests[0::2], requests[1::2]]))
    return {k: v for part in parts for k, v in part.items()}


@pytest.fixture(scope="module")
def help_texts():
    return helps()


def test_the_docs_name_commands():
    """The scan finds what it should (a parser that found nothing would pass everything below)."""
    mods = {mod for _, _, mod, _ in PY}
    assert {"audit.certify", "audit.samples", "world", "rlhf.train_rl"} <= mods, sorted(mods)
    targets = {rest.split()[0] for *_, rest in MAKE if rest.split()}
    assert {"certify", "test", "demo"} <= targets, sorted(targets)


def test_every_python_m_module_exists():
    missing = sorted({f"{f}:{ln}: python -m {mod}" for f, ln, mod, _ in PY if importlib.util.find_spec(mod) is None})
    assert not missing, "modules the docs name that do not exist:\n" + "\n".join(missing)


def test_every_flag_is_in_its_commands_help(help_texts):
    problems = set()
    for f, ln, mod, rest in PY:
        flags = [fl for fl in FLAG.findall(rest) if fl != "--help"]
        if not flags or importlib.util.find_spec(mod) is None:
            continue
        key = help_key(mod, rest, help_texts)
        code, text = help_texts[key]
        if code != 0:
            problems.add(f"{f}:{ln}: python -m {' '.join(key)} --help exits {code}: {text.strip()[-300:]}")
            continue
        for fl in flags:
            if not re.search(rf"(?<![\w-]){re.escape(fl)}(?![\w-])", text):
                problems.add(f"{f}:{ln}: python -m {' '.join(key)} has no {fl}")
    assert not problems, "flags the docs give that the command does not take:\n" + "\n".join(sorted(problems))


def makefile() -> tuple[set[str], set[str]]:
    text = (ROOT / "Makefile").read_text()
    targets = {t for line in re.findall(r"^([\w. -]+?)\s*:(?!=)", text, re.M) for t in line.split()}
    variables = set(re.findall(r"^([A-Z_]+)\s*[?:]?=", text, re.M)) | set(re.findall(r"\$\(([A-Z_]+)\)", text))
    return targets, variables


def test_every_make_target_and_variable_exists():
    targets, variables = makefile()
    problems = set()
    for f, ln, _, rest in MAKE:
        words = [w.strip("[]") for w in rest.split()]
        assigns = [w.split("=", 1)[0] for w in words if re.match(r"^[A-Z_]+=", w)]
        named = [w for w in words if re.match(r"^[a-z][\w-]*$", w)]
        if named and named[0] not in targets:
            problems.add(f"{f}:{ln}: make {named[0]}: no such target")
        problems.update(f"{f}:{ln}: make ... {v}=: the Makefile reads no {v}" for v in assigns if v not in variables)
    assert not problems, "make commands in the docs that the Makefile does not have:\n" + "\n".join(sorted(problems))


LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file (lower case, punctuation dropped, spaces to hyphens)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_resolves():
    """[text](file.md#anchor) links between the docs point at a file that exists, and at a heading it has."""
    problems = []
    for path in DOCS:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                problems.append(f"{path.relative_to(ROOT)}: ({target}): no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{path.relative_to(ROOT)}: ({target}): no such heading")
    assert not problems, "links in the docs that lead nowhere:\n" + "\n".join(problems)


def test_the_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "README.md" and f"]({p.name})" not in index]
    assert not missing, f"docs/README.md does not list: {missing}"
