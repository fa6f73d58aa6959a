"""Reading a result, a log or a table bench did not write: a regular file, read to a bound."""

from __future__ import annotations

import errno
import os

import pytest

from benchmarks.results import NotARegularFile, read_regular


def test_a_file_is_read_whole_up_to_the_bound(tmp_path):
    path = tmp_path / "result.json"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, 100) == b"x" * 100
    with pytest.raises(NotARegularFile) as caught:
        read_regular(path, 99)
    assert caught.value.errno == errno.EFBIG and "larger than 99 bytes" in str(caught.value)


def test_a_file_of_many_reads_is_read_whole(tmp_path):
    """read_regular asks read(2) for at most 1 MiB at a time and reads on to the end."""
    path = tmp_path / "result.json"
    data = os.urandom(3 * 2**20 + 5)
    path.write_bytes(data)
    assert read_regular(path, 4 * 2**20) == data
    assert read_regular(path, len(data)) == data
    with pytest.raises(NotARegularFile):
        read_regular(path, len(data) - 1)


def test_a_file_larger_than_its_size_says_is_read_to_its_end_or_the_bound():
    """procfs gives its files a size of 0 and then their text: read_regular reads what fstat
    says and a byte more, and reads on when there is more, as for a file still growing."""
    path = "/proc/self/status"
    assert os.stat(path).st_size == 0
    text = read_regular(path, 1 << 20)
    assert text.startswith(b"Name:") and text.endswith(b"\n") and b"\nPid:" in text
    with pytest.raises(NotARegularFile) as caught:
        read_regular(path, 10)
    assert caught.value.errno == errno.EFBIG


def test_what_is_not_a_regular_file_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile, match="a FIFO, not a file"):
        read_regular(fifo, 100)
