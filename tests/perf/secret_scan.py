"""How long the secret check takes on hostile text: it must be linear in the text's length.
Not part of the test suite; run

    python tests/perf/secret_scan.py

Every text of a sweep or a profile (up to 1 MiB, docs/concepts/hardening.md) passes `fields.secret_text`
before it is planned. Two texts that made a pattern quadratic are timed at growing lengths: a
run of letters (a URL scheme was once tried from each of its characters) and "a://" followed by
colons (a URL's user:password was once split at each colon). Linear: the time grows as the length.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config.fields import secret_text


def main() -> None:
    print(f"{'text':<8} {'chars':>10} {'seconds':>9}")
    for name, make in (("letters", lambda n: "a" * n), ("colons", lambda n: "a://" + ":" * n)):
        for n in (2**16, 2**18, 2**20):
            text = make(n)
            start = time.perf_counter()
            secret_text(text)
            print(f"{name:<8} {n:>10,} {time.perf_counter() - start:>9.4f}", flush=True)


if __name__ == "__main__":
    main()
