"""docs/reference/cli.md, the command-line page, is what harness/commands/manual.py writes from bench's
parsers: a flag added, renamed or removed fails here until the page is written again."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from harness.commands import manual

PAGE = Path(__file__).resolve().parents[4] / "docs" / "reference" / "cli.md"


def test_the_page_is_what_the_parsers_write():
    assert PAGE.read_text() == manual.render(), (
        "write it again: python -m harness.commands.manual > docs/reference/cli.md"
    )


def test_the_page_has_every_command_and_every_argument_says_what_it_does():
    page = PAGE.read_text()
    commands = re.findall(r"^## (bench [a-z ]+)$", page, re.M)
    for name in ("bench sweep", "bench history add", "bench history grant", "bench regress", "bench run transformer"):
        assert name in commands
    assert re.findall(r"^\| `[^`]+` \|\s*\|$", page, re.M) == []  # no argument without a word
    assert "| `--cluster CLUSTER` | the cluster it ran on |" in page.split("## bench history add\n", 1)[1]


def test_a_flag_the_page_lacks_is_seen():
    parser = argparse.ArgumentParser(prog="bench x")
    parser.add_argument("--one", help="the first")
    before = manual._section("bench x", parser, "x")
    parser.add_argument("--two", help="the second")
    assert manual._section("bench x", parser, "x") != before
    assert "| `--two TWO` | the second |" in manual._section("bench x", parser, "x")
