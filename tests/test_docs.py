"""The docs: the mdBook in docs/ builds, every page the summary lists
exists, every relative link of the README and the book reaches a file (and
a heading, when it names one), every `floe` command they show exists with
its flags, and the README stays a front page."""

import os
import pathlib
import re
import shutil
import subprocess
import time

from conftest import ROOT

DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def mdbook():
    found = shutil.which("mdbook") or str(pathlib.Path.home() / ".cargo" / "bin" / "mdbook")
    assert os.path.exists(found), "mdbook is not installed (scripts/test.sh installs it)"
    return found


def book_pages():
    summary = (DOCS / "SUMMARY.md").read_text()
    return [DOCS / target for target in LINK.findall(summary)]


def anchors(page):
    """The heading ids mdBook and GitHub give `page`'s headings."""
    ids = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            ids.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return ids


def test_the_book_builds(tmp_path):
    built = subprocess.run([mdbook(), "build", str(DOCS), "--dest-dir", str(tmp_path / "book")],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert "WARN" not in built.stderr and "ERROR" not in built.stderr, built.stderr
    assert (tmp_path / "book" / "index.html").exists()
    for page in book_pages():
        html = tmp_path / "book" / page.relative_to(DOCS).with_suffix(".html")
        assert html.exists(), html


def test_every_relative_link_reaches_its_target():
    pages = [ROOT / "README.md", *book_pages()]
    broken = []
    for page in pages:
        assert page.exists(), page
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert 100 <= len(lines) <= 200, len(lines)


def floe_commands(text):
    """Every `floe ...` command line of the page's shell blocks."""
    import shlex
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("#"):
                continue
            for part in re.split(r"&&|\|\||\||;|\$\(", line):
                part = part.strip()
                for prefix in ("cargo run --release -p floe --", "./target/release/floe", "floe"):
                    if part.startswith(prefix + " "):
                        try:
                            yield shlex.split(part[len(prefix):].replace("$(", "").replace(")", ""))
                        except ValueError:
                            yield part[len(prefix):].split()
                        break


def test_every_floe_command_in_the_docs_exists_with_its_flags():
    """Each `floe` command the README and the book show names subcommands
    and flags the binary has (other commands, of other tools, are
    illustrative; the deployment files' own commands run in their tests)."""
    from conftest import FLOE
    top = subprocess.run([FLOE, "--help"], capture_output=True, text=True, check=True).stdout
    helps = {"": top + " --version"}
    wrong, checked = [], 0
    for page in [ROOT / "README.md", *book_pages()]:
        for words in floe_commands(page.read_text()):
            path = []
            for word in words:
                if word.startswith("-") or not re.fullmatch(r"[a-z][a-z-]*", word):
                    break
                candidate = " ".join(path + [word])
                if candidate not in helps:
                    done = subprocess.run([FLOE, *path, word, "--help"], capture_output=True, text=True)
                    helps[candidate] = done.stdout if done.returncode == 0 else None
                if helps[candidate] is None:
                    break
                path.append(word)
            if not path and words and not words[0].startswith("-"):
                wrong.append(f"{page.name}: floe {' '.join(words)}: no such command")
                continue
            checked += 1
            help_text = helps[" ".join(path)]
            for flag in (w.split("=", 1)[0] for w in words if w.startswith("--")):
                if flag not in help_text:
                    wrong.append(f"{page.name}: floe {' '.join(path)}: no flag {flag}")
    assert not wrong, wrong
    assert checked > 40, checked


def shell_blocks(page):
    return re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)


def test_the_quick_start_runs_as_written(tmp_path):
    """The quick start (and the README's "Try it", the same steps), run as
    written: the broker started by its block, then every later block
    through bash, with `floe` on the PATH and the two default ports moved
    to free ones; the stop-and-start promise checked between."""
    from conftest import FLOE, free_port

    port, admin = free_port(), free_port()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "floe").symlink_to(FLOE)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "FLOE_LISTEN": f"127.0.0.1:{port}", "FLOE_ADMIN_LISTEN": f"127.0.0.1:{admin}",
           # The admin tools' default broker, moved with it.
           "FLOE_BOOTSTRAP_SERVER": f"127.0.0.1:{port}"}

    def moved(text):
        return text.replace("localhost:9092", f"127.0.0.1:{port}").replace(
            "localhost:9644", f"127.0.0.1:{admin}").replace("cargo run --release -p floe --", "floe")

    for page in (DOCS / "quickstart.md", ROOT / "README.md"):
        blocks = [moved(b) for b in shell_blocks(page)]
        start = next(b for b in blocks if b.strip().endswith("floe agent"))
        later = blocks[blocks.index(start) + 1:]
        workdir = tmp_path / page.stem
        workdir.mkdir()

        def started():
            log = workdir / "agent.log"
            before = log.read_text().count("floe agent ready") if log.exists() else 0
            agent = subprocess.Popen(["bash", "-c", "exec " + start.strip()], env=env, cwd=workdir,
                                     stdout=open(log, "a"), stderr=subprocess.STDOUT)
            deadline = time.time() + 30
            while time.time() < deadline and log.read_text().count("floe agent ready") == before:
                assert agent.poll() is None, log.read_text()
                time.sleep(0.1)
            return agent

        agent = started()
        try:
            for block in later:
                if "scripts/test.sh" in block:  # the suite itself: this very run
                    continue
                if "docker" in block:  # needs an engine: the compose page's test runs its files
                    break
                ran = subprocess.run(["bash", "-euo", "pipefail", "-c", block], env=env, cwd=workdir,
                                     capture_output=True, text=True, timeout=120)
                assert ran.returncode == 0, f"{page.name}:\n{block}\n{ran.stdout}{ran.stderr}"
                if "kcat -C" in block:
                    assert "0/0 one" in ran.stdout and "0/2 three" in ran.stdout, ran.stdout
                if "readyz" in block:
                    assert ran.stdout == "ready\n", ran.stdout
            # "Stop the agent (even kill -9) and start it again: everything
            # acknowledged is still there, at the same offsets."
            agent.kill()
            agent.wait()
            agent = started()
            read = subprocess.run(["kcat", "-C", "-b", f"127.0.0.1:{port}", "-t", "demo", "-o", "beginning",
                                   "-e", "-f", "%p/%o %s\n"], capture_output=True, text=True, timeout=60)
            assert read.stdout.splitlines() == ["0/0 one", "0/1 two", "0/2 three"], read.stderr
        finally:
            agent.kill()
            agent.wait()


# Pages whose shell blocks a test runs as written.
RUN_AS_WRITTEN = {"quickstart.md", "README.md"}


def test_every_other_command_is_marked_illustrative():
    """A shell block that runs anything but floe (whose commands are
    checked above) is run as written by a test (RUN_AS_WRITTEN) or says it
    is illustrative (`<!-- illustrative -->` before it): the reader knows
    which commands were run."""
    unmarked = []
    for page in [ROOT / "README.md", *book_pages()]:
        if page.name in RUN_AS_WRITTEN and page.name != "README.md":
            continue
        text = page.read_text()
        for m in re.finditer(r"```sh\n(.*?)```", text, re.S):
            lines = [line.strip() for line in re.sub(r"\\\n\s*", " ", m.group(1)).splitlines()]
            others = [line for line in lines if line and not line.startswith("#") and not line.startswith(
                ("floe ", "./target/release/floe", "cargo run --release -p floe --"))]
            # The README's own steps run in the quick start's test, and the
            # suite's command is CI's.
            if page.name == "README.md" and all("kcat" in o or "scripts/test.sh" in o for o in others):
                continue
            if others and not text[:m.start()].rstrip().endswith("<!-- illustrative -->"):
                unmarked.append(f"{page.name}: {others[0]}")
    assert not unmarked, unmarked
