"""How long ``ThreadedSink.write`` keeps the caller when the sink behind it is slow.

An inner sink that takes ``--delay`` seconds per write (slow storage, a remote logger) behind a
:class:`jrl.app.sinks.ThreadedSink`: the caller's time for ``--writes`` writes, against the
``writes * delay`` seconds the inner sink needs. The test suite checks the same property without
a clock (``tests/test_sinks.py::test_threaded_write_does_not_wait_for_slow_io``: the writes
return while the inner write is held); this measures it, and ``--check`` exits with 1 when the
caller waited for more than ``--limit`` of one inner write.

Usage::

    python benchmarks/threaded_sink.py [--delay 0.1] [--writes 3] [--repeats 5] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


class SlowSink:
    def __init__(self, delay: float):
        self.delay, self.count = delay, 0

    def write(self, record):
        time.sleep(self.delay)
        self.count += 1

    def close(self):
        pass


def one(delay: float, writes: int) -> float:
    from jrl.app.sinks import Record, ThreadedSink

    inner = SlowSink(delay)
    sink = ThreadedSink(inner)
    start = time.perf_counter()
    for i in range(writes):
        sink.write(Record(i, 10 * i, {"x": np.zeros(1)}, [{"run": 0}]))
    caller = time.perf_counter() - start
    sink.close()
    assert inner.count == writes
    return caller


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay", type=float, default=0.1, help="seconds per inner write")
    p.add_argument("--writes", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--limit", type=float, default=0.9, help="--check: at most this x one delay")
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    times = [one(a.delay, a.writes) for _ in range(a.repeats)]
    median = statistics.median(times)
    print(
        f"{a.writes} writes to a sink taking {a.delay:.3f} s each: the caller waited "
        f"{1e3 * median:.2f} ms (median of {a.repeats}; max {1e3 * max(times):.2f} ms), the "
        f"inner sink {a.writes * a.delay:.2f} s"
    )
    if a.check and max(times) >= a.limit * a.delay:
        raise SystemExit(f"check failed: the caller waited {max(times):.3f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
