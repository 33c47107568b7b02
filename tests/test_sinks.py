"""Metric sinks: the exact text of the CSV and JSONL files, TensorBoard events read back from the
event file's bytes, resume truncation, the threaded and fan-out wrappers, and construction by
name."""

import json
import math
import re
import struct
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from jrl.app import sinks
from jrl.app.sinks import (
    CSVSink,
    JSONLSink,
    MultiSink,
    Record,
    TensorBoardSink,
    ThreadedSink,
    WandbSink,
    make_sinks,
    summarize,
)

NAN = float("nan")
RUNS = ({"run": 0, "seed": 0, "learning_rate": 3e-4}, {"run": 1, "seed": 1, "learning_rate": 1e-3})


def record(iteration, loss, ret, runs=RUNS, **extra):
    """A record of the two RUNS at ``iteration`` (``env_steps = 100 * iteration``); ``loss`` is
    float32."""
    metrics = {"train/loss": np.array(loss, np.float32), "eval/return": np.array(ret, np.float64)}
    metrics.update({k: np.array(v) for k, v in extra.items()})
    return Record(iteration=iteration, env_steps=100 * iteration, metrics=metrics, runs=runs)


def lines(path):
    return Path(path).read_text().splitlines()


# ---------------------------------------------------------------------------------------- Record


def test_record_rejects_metrics_not_of_shape_runs():
    with pytest.raises(ValueError, match=r"shape \[R\] = \(2,\).*'bad': \(3,\)"):
        Record(1, 100, {"ok": np.zeros(2), "bad": np.zeros(3)}, RUNS)


def test_summarize_skips_nan_runs_and_all_nan_metrics():
    rec = Record(
        1,
        100,
        {"a": np.array([1.0, NAN, 4.0]), "b": np.full(3, NAN), "c": np.array([-2.0, 0.5, 0.5])},
        [{"run": r} for r in range(3)],
    )
    assert summarize(rec) == {
        "a/mean": 2.5,
        "a/min": 1.0,
        "a/max": 4.0,
        "c/mean": -1.0 / 3.0,
        "c/min": -2.0,
        "c/max": 0.5,
    }


# ------------------------------------------------------------------------------------------- CSV


def test_csv_header_rows_and_values(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CSVSink(path)
    sink.write(record(1, [0.5, 0.1], [1 / 3, 2.0]))
    assert lines(path) == [  # flushed by write, before close
        "run,seed,learning_rate,iteration,env_steps,eval/return,train/loss",
        "0,0,0.0003,1,100,0.3333333333333333,0.5",
        "1,1,0.001,1,100,2.0,0.1",  # float32 0.1: the shortest text that reads back to it
    ]
    sink.write(record(2, [0.25, -1e-8], [-3.0, 1e20]))
    sink.close()
    assert lines(path)[3:] == ["0,0,0.0003,2,200,-3.0,0.25", "1,1,0.001,2,200,1e+20,-1e-08"]
    assert np.float32(lines(path)[2].split(",")[-1]) == np.float32(0.1)


def test_csv_nan_and_missing_metric(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CSVSink(path)
    sink.write(record(1, [NAN, 1.0], [NAN, float("inf")]))
    sink.write(
        Record(2, 200, {"train/loss": np.array([2.0, NAN], np.float32)}, RUNS)
    )  # no eval/return
    sink.close()
    assert lines(path)[1:] == [
        "0,0,0.0003,1,100,nan,nan",
        "1,1,0.001,1,100,inf,1.0",
        "0,0,0.0003,2,200,,2.0",
        "1,1,0.001,2,200,,nan",
    ]
    assert math.isnan(float(lines(path)[1].split(",")[-1]))


def test_csv_new_metric_name_is_an_error_and_writes_nothing(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CSVSink(path)
    sink.write(record(1, [1.0, 2.0], [3.0, 4.0]))
    before = path.read_text()
    with pytest.raises(ValueError, match=r"columns \['train/entropy'\] are not in the header"):
        sink.write(record(2, [1.0, 2.0], [3.0, 4.0], **{"train/entropy": [0.0, 0.0]}))
    sink.close()
    assert path.read_text() == before


@pytest.mark.parametrize("cls,name", [(CSVSink, "metrics.csv"), (JSONLSink, "metrics.jsonl")])
def test_write_many_equals_one_write_each(tmp_path, cls, name):
    one, many = cls(tmp_path / "one" / name), cls(tmp_path / "many" / name)
    for rec in three_records():
        one.write(rec)
    many.write_many(three_records())
    one.close(), many.close()
    assert (tmp_path / "many" / name).read_text() == (tmp_path / "one" / name).read_text()


def test_csv_write_many_with_a_bad_record_writes_none_of_them(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CSVSink(path)
    sink.write(record(1, [1.0, 2.0], [3.0, 4.0]))
    before = path.read_text()
    with pytest.raises(ValueError, match="not in the header"):
        sink.write_many(
            [record(2, [1.0, 2.0], [3.0, 4.0]), record(3, [1.0, 2.0], [3.0, 4.0], x=[0, 0])]
        )
    sink.close()
    assert path.read_text() == before


def test_csv_run_keys_must_not_clash_or_differ(tmp_path):
    sink = CSVSink(tmp_path / "metrics.csv")
    with pytest.raises(ValueError, match="clash"):
        sink.write(
            record(
                1,
                [1.0, 2.0],
                [3.0, 4.0],
                runs=({"run": 0, "iteration": 5}, {"run": 1, "iteration": 5}),
            )
        )
    with pytest.raises(ValueError, match="same identity keys"):
        sink.write(record(1, [1.0, 2.0], [3.0, 4.0], runs=({"run": 0, "seed": 0}, {"run": 1})))
    sink.close()


def test_csv_resume_keeps_rows_up_to_k_then_appends(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CSVSink(path)
    for i in (1, 2, 3):
        sink.write(record(i, [i, 10 * i], [-i, -10 * i]))
    sink.close()
    with open(path, "a") as f:
        f.write("0,0,0.0003,4,400,-4.")  # a row cut short by a crash
    header = lines(path)[0]

    sink = CSVSink(path, resume_from_iteration=2)
    assert lines(path) == [
        header,
        "0,0,0.0003,1,100,-1.0,1.0",
        "1,1,0.001,1,100,-10.0,10.0",
        "0,0,0.0003,2,200,-2.0,2.0",
        "1,1,0.001,2,200,-20.0,20.0",
    ]
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed over the original
    sink.write(record(3, [7.0, 8.0], [NAN, 9.0]))
    sink.close()
    assert lines(path)[5:] == ["0,0,0.0003,3,300,nan,7.0", "1,1,0.001,3,300,9.0,8.0"]
    assert len(lines(path)) == 7


def test_csv_resume_header_fixes_the_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("run,iteration,env_steps,a\n0,1,100,5.0\n0,2,200,6.0\n")
    sink = CSVSink(path, resume_from_iteration=1)
    with pytest.raises(ValueError, match=r"\['b'\] are not in the header"):
        sink.write(Record(2, 200, {"a": np.ones(1), "b": np.ones(1)}, [{"run": 0}]))
    sink.write(Record(2, 200, {"a": np.array([0.5])}, [{"run": 0}]))
    sink.close()
    assert path.read_text() == "run,iteration,env_steps,a\n0,1,100,5.0\n0,2,200,0.5\n"


def test_csv_resume_without_a_file_starts_one_and_fresh_runs_overwrite(tmp_path):
    path = tmp_path / "sub" / "metrics.csv"
    sink = CSVSink(path, resume_from_iteration=5)
    sink.write(record(6, [1.0, 2.0], [3.0, 4.0]))
    sink.close()
    assert len(lines(path)) == 3 and lines(path)[0].startswith("run,")
    CSVSink(path).close()  # no resume: a new file
    assert path.read_text() == ""


# ----------------------------------------------------------------------------------------- JSONL


def test_jsonl_objects_with_null_for_non_finite(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JSONLSink(path)
    sink.write(record(1, [0.5, 0.1], [NAN, float("-inf")]))
    objects = [json.loads(line) for line in lines(path)]  # strict JSON: no NaN/Infinity tokens
    sink.close()
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert objects == [
        {
            "iteration": 1,
            "env_steps": 100,
            "run": 0,
            "seed": 0,
            "learning_rate": 3e-4,
            "metrics": {"train/loss": 0.5, "eval/return": None},
        },
        {
            "iteration": 1,
            "env_steps": 100,
            "run": 1,
            "seed": 1,
            "learning_rate": 1e-3,
            "metrics": {"train/loss": 0.1, "eval/return": None},
        },  # float32 0.1 written as 0.1
    ]
    assert list(objects[0]) == ["iteration", "env_steps", "run", "seed", "learning_rate", "metrics"]


def test_jsonl_numpy_run_identity_values(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JSONLSink(path)
    runs = [{"run": np.int64(0), "gamma": np.float32(0.99), "clip": np.float64(NAN)}]
    sink.write(Record(1, 100, {"a": np.array([2.5])}, runs))
    sink.close()
    assert json.loads(path.read_text()) == {
        "iteration": 1,
        "env_steps": 100,
        "run": 0,
        "gamma": 0.99,
        "clip": None,
        "metrics": {"a": 2.5},
    }


def test_jsonl_resume_keeps_lines_up_to_k_then_appends(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JSONLSink(path)
    for i in (1, 2, 3):
        sink.write(record(i, [i, 10 * i], [-i, -10 * i]))
    sink.close()
    with open(path, "a") as f:
        f.write('{"iteration": 4, "env_st')  # cut short by a crash
    sink = JSONLSink(path, resume_from_iteration=2)
    assert [(o["iteration"], o["run"]) for o in map(json.loads, lines(path))] == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
    ]
    sink.write(record(3, [7.0, 8.0], [NAN, 9.0]))
    sink.close()
    objects = [json.loads(line) for line in lines(path)]
    assert [(o["iteration"], o["run"]) for o in objects] == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (3, 0),
        (3, 1),
    ]
    assert objects[4]["metrics"] == {"train/loss": 7.0, "eval/return": None}
    assert objects[1]["metrics"] == {"train/loss": 10.0, "eval/return": -10.0}


# ----------------------------------------------------------------------------------- TensorBoard


def read_events(path):
    """The Event protos of one event file, from its TFRecord framing: length (u64 LE), masked
    crc32c of the length (u32), data, masked crc32c of the data (u32)."""
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c

    data, events, at = Path(path).read_bytes(), [], 0
    while at < len(data):
        header = data[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[at + 8 : at + 12])[0] == masked_crc32c(header)
        payload = data[at + 12 : at + 12 + length]
        assert struct.unpack("<I", data[at + 12 + length : at + 16 + length])[0] == masked_crc32c(
            payload
        )
        event = event_pb2.Event()
        event.ParseFromString(payload)
        events.append(event)
        at += 16 + length
    return events


def event_files(logdir):
    return sorted(Path(logdir).glob("events.out.tfevents.*"))


def scalars(events):
    """{tag: [(step, value)]} of the summary events."""
    out = {}
    for event in events:
        for value in event.summary.value:
            out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def three_records():
    return [
        record(1, [1.0, 3.0], [0.5, 0.25]),
        record(2, [NAN, 2.0], [-1.0, 1.5]),
        record(3, [NAN, NAN], [4.0, 8.0]),
    ]  # train/loss: no run has a value


SEED0, SEED1 = "seed0-learning_rate=0.0003", "seed1-learning_rate=0.001"  # run_name(RUNS[r])


def test_run_name():
    assert [sinks.run_name(run) for run in RUNS] == [SEED0, SEED1]
    assert sinks.run_name({"run": 2, "seed": 7}) == "seed7"
    assert sinks.run_name({"run": 4}) == "run4"
    assert sinks.run_name({"run": 0, "seed": 1, "arm": "left"}) == "seed1-arm=left"


def test_tensorboard_one_run_per_seed_every_value_at_env_steps(tmp_path):
    sink = TensorBoardSink(tmp_path / "tb")
    for rec in three_records():
        sink.write(rec)
    sink.close()
    sink.close()  # a second close does nothing
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == [SEED0, SEED1]
    got = {}
    for name in (SEED0, SEED1):
        (path,) = event_files(tmp_path / "tb" / name)
        events = read_events(path)
        assert events[0].file_version == "brain.Event:2"
        got[name] = scalars(events)
    assert got == {  # NaN values are not written
        SEED0: {"train/loss": [(100, 1.0)], "eval/return": [(100, 0.5), (200, -1.0), (300, 4.0)]},
        SEED1: {
            "train/loss": [(100, 3.0), (200, 2.0)],
            "eval/return": [(100, 0.25), (200, 1.5), (300, 8.0)],
        },
    }
    with pytest.raises(RuntimeError, match="closed TensorBoardSink"):
        sink.write(three_records()[0])


def test_tensorboard_write_many_equals_one_write_each(tmp_path):
    one, many = TensorBoardSink(tmp_path / "one"), TensorBoardSink(tmp_path / "many")
    for rec in three_records():
        one.write(rec)
    many.write_many(three_records())
    one.close(), many.close()
    for name in (SEED0, SEED1):
        (a,), (b,) = event_files(tmp_path / "one" / name), event_files(tmp_path / "many" / name)
        assert scalars(read_events(a)) == scalars(read_events(b))


def test_tensorboard_refuses_runs_of_the_same_name(tmp_path):
    runs = ({"run": 0, "seed": 3}, {"run": 1, "seed": 3})
    with pytest.raises(ValueError, match="same name"):
        TensorBoardSink(tmp_path).write(record(1, [1.0, 2.0], [0.0, 0.0], runs=runs))


def test_tensorboard_resume_purges_steps_after_the_checkpoint(tmp_path):
    from tensorboardX.proto.event_pb2 import SessionLog

    logdir = tmp_path / "tb"
    sink = TensorBoardSink(logdir)
    for rec in three_records():
        sink.write(rec)
    sink.close()
    sink = TensorBoardSink(logdir, resume_from_step=200)  # the checkpoint at iteration 2
    sink.write(record(3, [5.0, 7.0], [1.0, 1.0]))
    sink.close()

    first, second = event_files(logdir / SEED1)  # the same second: still two files, in order
    assert len(read_events(first)) == 4
    events = read_events(second)
    # tensorboardX's purge_step: a file_version event and a SessionLog START at step S + 1
    assert (events[0].step, events[0].file_version) == (0, "brain.Event:2")
    assert (events[1].step, events[1].file_version) == (201, "brain.Event:2")
    assert (events[2].step, events[2].session_log.status) == (201, SessionLog.START)
    assert scalars(events[3:])["train/loss"] == [(300, 7.0)]

    # TensorBoard's rule: a START at step s drops the events read so far with step >= s
    kept = []
    for event in read_events(first) + events:
        if event.HasField("session_log") and event.session_log.status == SessionLog.START:
            kept = [e for e in kept if e.step < event.step]
        kept.append(event)
    assert scalars(kept)["eval/return"] == [(100, 0.25), (200, 1.5), (300, 1.0)]
    assert scalars(kept)["train/loss"] == [(100, 3.0), (200, 2.0), (300, 7.0)]


# ----------------------------------------------------------------------------------------- wandb


def test_wandb_missing_asks_for_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails, installed or not
    with pytest.raises(
        ImportError, match=re.escape("the wandb sink needs `pip install jrl-jax[wandb]`")
    ):
        WandbSink(project="p")


class FakeWandbRun:
    def __init__(self, **init):
        self.init, self.logged, self.finished = init, [], 0

    def log(self, data, step):
        self.logged.append((step, data))

    def finish(self):
        self.finished += 1


@pytest.fixture
def fake_wandb(monkeypatch):
    module = types.ModuleType("wandb")
    module.runs = []
    module.init = lambda **kwargs: module.runs.append(FakeWandbRun(**kwargs)) or module.runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_wandb_logs_the_summary_and_each_run_at_env_steps(fake_wandb):
    sink = WandbSink(project="p", run_name="r", config={"lr": 0.1}, mode="offline")
    for rec in three_records():
        sink.write(rec)
    sink.close()
    sink.close()
    (run,) = fake_wandb.runs
    assert run.init == {"project": "p", "name": "r", "config": {"lr": 0.1}, "mode": "offline"}
    assert run.finished == 1
    assert [step for step, _ in run.logged] == [100, 200, 300]
    assert run.logged[1][1] == {
        "train/loss/mean": 2.0,
        "train/loss/min": 2.0,
        "train/loss/max": 2.0,
        "eval/return/mean": 0.25,
        "eval/return/min": -1.0,
        "eval/return/max": 1.5,
        f"{SEED0}/eval/return": -1.0,
        f"{SEED1}/train/loss": 2.0,
        f"{SEED1}/eval/return": 1.5,
    }
    assert set(run.logged[2][1]) == {
        "eval/return/mean",
        "eval/return/min",
        "eval/return/max",
        f"{SEED0}/eval/return",
        f"{SEED1}/eval/return",
    }


# ------------------------------------------------------------------------------------ ThreadedSink


class ListSink:
    """Keeps what it is given; ``fail_at`` makes that iteration's write raise."""

    def __init__(self, fail_at=None):
        self.records, self.closed, self.fail_at = [], 0, fail_at

    def write(self, rec):
        if rec.iteration == self.fail_at:
            raise OSError(f"disk full at {rec.iteration}")
        self.records.append(rec)

    def close(self):
        self.closed += 1


def small(i, value=0.0):
    return Record(i, 10 * i, {"x": np.array([value])}, [{"run": 0}])


def test_threaded_delivers_every_record_in_order():
    inner = ListSink()
    sink = ThreadedSink(inner, max_queue=8)  # a small queue: writes wait for the worker at times
    for i in range(200):
        sink.write(small(i, float(i)))
    sink.close()
    assert [r.iteration for r in inner.records] == list(range(200))
    assert [float(r.metrics["x"][0]) for r in inner.records] == [float(i) for i in range(200)]
    assert inner.closed == 1


def test_threaded_write_many_is_one_item_delivered_whole():
    inner = ListSink()
    sink = ThreadedSink(inner, max_queue=1)
    sink.write_many([small(i) for i in range(5)])  # one queue item despite max_queue=1
    sink.write(small(5))
    sink.close()
    assert [r.iteration for r in inner.records] == list(range(6))


def test_write_records_falls_back_to_write():
    inner = ListSink()  # has no write_many
    sinks.write_records(inner, [small(1), small(2)])
    assert [r.iteration for r in inner.records] == [1, 2]
    multi = MultiSink([ListSink(), CSVSink.__new__(CSVSink)])
    with pytest.raises(AttributeError):  # a half-built CSVSink: the first sink still gets them
        multi.write_many([small(3)])
    assert [r.iteration for r in multi.sinks[0].records] == [3]


class BlockedSink(ListSink):
    """Its writes wait until ``release`` is set (I/O that does not finish); ``entered`` is set
    when the worker is inside the first write."""

    def __init__(self):
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def write(self, rec):
        self.entered.set()
        assert self.release.wait(timeout=60), "never released"
        super().write(rec)


def test_threaded_write_does_not_wait_for_slow_io():
    """``write`` returns while the inner sink is still stuck in an earlier write (no timing: the
    inner write cannot finish before the test releases it). How long a write takes is measured
    in benchmarks/logging_overhead.py."""
    inner = BlockedSink()
    sink = ThreadedSink(inner)
    for i in range(3):
        sink.write(small(i))  # would never return if it waited for the inner write
    assert inner.entered.wait(timeout=60)
    assert inner.records == []  # all three still queued or in progress
    inner.release.set()
    sink.close()
    assert [r.iteration for r in inner.records] == [0, 1, 2]


def test_threaded_copies_the_arrays():
    inner = ListSink()
    sink = ThreadedSink(inner)
    buffer = np.array([1.5])
    sink.write(Record(1, 10, {"x": buffer}, [{"run": 0}]))
    buffer[0] = -1.0  # the caller reuses its buffer
    sink.close()
    assert inner.records[0].metrics["x"][0] == 1.5


def test_threaded_worker_error_is_raised_on_close_and_later_records_dropped():
    inner = ListSink(fail_at=2)
    sink = ThreadedSink(inner)
    for i in range(5):
        sink.write(small(i))
        if i == 2:
            break  # the failure may not have happened yet: close must still report it
    with pytest.raises(OSError, match="disk full at 2"):
        sink.close()
    assert [r.iteration for r in inner.records] == [0, 1]
    assert inner.closed == 1
    sink.close()  # closed: nothing more to raise


def test_threaded_worker_error_is_raised_once_by_the_next_call():
    inner = ListSink(fail_at=1)
    sink = ThreadedSink(inner)
    sink.write(small(1))
    sink.write(small(2))
    with pytest.raises(OSError, match="disk full at 1"):
        sink.flush()  # waits for the worker, then raises
    sink.write(small(3))  # already raised: not again; the record is dropped
    sink.close()
    assert inner.records == [] and inner.closed == 1


def test_threaded_write_after_close_is_an_error():
    sink = ThreadedSink(ListSink())
    sink.close()
    with pytest.raises(RuntimeError, match="closed ThreadedSink"):
        sink.write(small(0))


def test_threaded_tensorboard(tmp_path):
    sink = ThreadedSink(TensorBoardSink(tmp_path))
    for rec in three_records():
        sink.write(rec)
    sink.close()
    (path,) = event_files(tmp_path / SEED1)
    assert scalars(read_events(path))["eval/return"] == [(100, 0.25), (200, 1.5), (300, 8.0)]


# ----------------------------------------------------------------------------------- MultiSink


class FailingSink(ListSink):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def write(self, rec):
        raise self.error

    def close(self):
        super().close()
        raise self.error


def test_multisink_fans_out_and_closes_all_even_if_one_raises():
    first, second = FailingSink(ValueError("first")), FailingSink(KeyError("second"))
    last = ListSink()
    sink = MultiSink([first, last, second])
    with pytest.raises(ValueError, match="first") as info:
        sink.write(small(1))
    assert "KeyError: 'second'" in "".join(info.value.__notes__)
    assert [r.iteration for r in last.records] == [1]  # written despite the failure before it
    with pytest.raises(ValueError, match="first"):
        sink.close()
    assert (first.closed, last.closed, second.closed) == (1, 1, 1)


# ---------------------------------------------------------------------------------- make_sinks


def test_make_sinks_unknown_name_lists_the_valid_ones_and_a_close_match(tmp_path):
    with pytest.raises(
        ValueError,
        match=re.escape(
            "unknown sink 'tensorbord'; valid sinks: csv, jsonl, tensorboard, wandb. "
            "Did you mean 'tensorboard'?"
        ),
    ):
        make_sinks(["csv", "tensorbord"], tmp_path / "out", runs=RUNS, config={})
    assert not (tmp_path / "out").exists()  # checked before anything is opened
    with pytest.raises(ValueError, match="more than once"):
        make_sinks(["csv", "csv"], tmp_path, runs=RUNS, config={})
    with pytest.raises(ValueError, match="resume_from_step"):
        make_sinks(["tensorboard"], tmp_path, runs=RUNS, config={}, resume_from_iteration=2)


def test_make_sinks_writes_every_file(tmp_path):
    sink = make_sinks(["csv", "jsonl", "tensorboard"], tmp_path, runs=RUNS, config={"agent": "ppo"})
    assert [type(s) for s in sink.sinks] == [CSVSink, JSONLSink, ThreadedSink]
    for rec in three_records():
        sink.write(rec)
    sink.close()
    assert len(lines(tmp_path / "metrics.csv")) == 1 + 3 * 2
    assert len(lines(tmp_path / "metrics.jsonl")) == 3 * 2
    (path,) = event_files(tmp_path / "tb" / SEED1)
    assert scalars(read_events(path))["train/loss"] == [(100, 3.0), (200, 2.0)]


def test_make_sinks_resume(tmp_path):
    sink = make_sinks(["csv", "jsonl", "tensorboard"], tmp_path, runs=RUNS, config={})
    for rec in three_records():
        sink.write(rec)
    sink.close()
    sink = make_sinks(
        ["csv", "jsonl", "tensorboard"],
        tmp_path,
        runs=RUNS,
        config={},
        resume_from_iteration=1,
        resume_from_step=100,
    )
    sink.close()
    assert len(lines(tmp_path / "metrics.csv")) == 1 + 2
    assert len(lines(tmp_path / "metrics.jsonl")) == 2
    for name in (SEED0, SEED1):  # the purge is written when the sink opens
        assert read_events(event_files(tmp_path / "tb" / name)[1])[1].step == 101


def test_make_sinks_wandb(tmp_path, fake_wandb):
    out = tmp_path / "ppo-cartpole"
    sink = make_sinks(["wandb"], out, runs=RUNS, config={"agent": "ppo"})
    sink.write(record(1, [1.0, 3.0], [0.5, 0.25]))
    sink.close()
    (run,) = fake_wandb.runs
    assert run.init == {
        "project": None,
        "name": "ppo-cartpole",
        "dir": str(out),
        "config": {"agent": "ppo", "runs": [dict(r) for r in RUNS]},
    }
    assert run.logged == [
        (
            100,
            {
                "train/loss/mean": 2.0,
                "train/loss/min": 1.0,
                "train/loss/max": 3.0,
                "eval/return/mean": 0.375,
                "eval/return/min": 0.25,
                "eval/return/max": 0.5,
                f"{SEED0}/train/loss": 1.0,
                f"{SEED0}/eval/return": 0.5,
                f"{SEED1}/train/loss": 3.0,
                f"{SEED1}/eval/return": 0.25,
            },
        )
    ]


def test_make_sinks_closes_what_it_opened_when_one_fails(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    opened = []
    real = sinks.CSVSink

    class Tracked(real):
        def close(self):
            opened.append(self)
            super().close()

    monkeypatch.setattr(sinks, "CSVSink", Tracked)
    with pytest.raises(ImportError, match="jrl-jax\\[wandb\\]"):
        make_sinks(["csv", "wandb"], tmp_path, runs=RUNS, config={})
    assert len(opened) == 1 and opened[0]._file.closed


def test_sinks_satisfy_the_protocol(tmp_path):
    for sink in (
        CSVSink(tmp_path / "a.csv"),
        JSONLSink(tmp_path / "a.jsonl"),
        MultiSink([]),
        ThreadedSink(ListSink()),
    ):
        assert isinstance(sink, sinks.Sink)
        sink.close()


# ------------------------------------------------------------------------- in a real run


def kept_scalars(logdir):
    """{tag: [(step, value)]} as TensorBoard shows a log folder: its event files in order, a
    SessionLog START at step s dropping the events read so far with step >= s."""
    from tensorboardX.proto.event_pb2 import SessionLog

    kept = []
    for path in event_files(logdir):
        for event in read_events(path):
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                kept = [e for e in kept if e.step < event.step]
            kept.append(event)
    return scalars(kept)


def test_tensorboard_in_a_run_and_its_resume(tmp_path):
    """`log=["tensorboard"]` in a real run writes one TensorBoard run per seed holding every
    iteration's metrics (3 reports of 2 iterations), the same values as metrics.csv.
    Continued from its checkpoint after 1024 steps, the finished run replays the rest:
    TensorBoard then shows each seed's curves once, the first file's later steps purged by
    the resumed file."""
    import csv

    import jrl

    run = tmp_path / "run"
    jrl.train(
        "ppo",
        "CartPole-v1",
        seeds=2,
        out=run,
        total_steps=3072,
        num_reports=3,
        checkpoint_every=1024,
        keep_checkpoints=5,
        log=["tensorboard"],
        progress=False,
    )
    assert sorted(p.name for p in (run / "tb").iterdir()) == ["seed0", "seed1"]
    whole = {seed: kept_scalars(run / "tb" / f"seed{seed}") for seed in (0, 1)}
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    steps = [512 * i for i in range(1, 7)]
    assert [int(r["env_steps"]) for r in rows if r["seed"] == "0"] == steps  # every iteration
    for seed in (0, 1):
        got = whole[seed]["train/loss"]
        assert [s for s, _ in got] == steps
        expected = [float(r["train/loss"]) for r in rows if r["seed"] == str(seed)]
        np.testing.assert_allclose([v for _, v in got], expected, rtol=1e-6)

    jrl.app.api.resume(run, step=2, keep_checkpoints=5, progress=False)  # replays 1536..3072
    for seed in (0, 1):
        files = event_files(run / "tb" / f"seed{seed}")
        assert len(files) == 2
        resumed = read_events(files[1])
        assert any(e.HasField("session_log") and e.step == 1025 for e in resumed)
        assert {s for s, _ in scalars(resumed)["train/loss"]} == set(steps[2:])
        assert kept_scalars(run / "tb" / f"seed{seed}") == whole[seed]  # each step once


def test_log_every_thins_what_the_sinks_get_and_keeps_each_report(tmp_path):
    """log_every=1536 env steps (3 iterations of 512) writes iterations 3 and 6, and each
    report's last iteration (2, 4, 6), to every sink; a sweep gets one TensorBoard run per
    seed and value. The in-memory history still has every iteration."""
    import jrl

    result = jrl.train(
        "ppo",
        "CartPole-v1",
        seeds=1,
        out=tmp_path / "run",
        total_steps=3072,
        num_reports=3,
        log=["jsonl", "tensorboard"],
        log_every=1536,
        sweep={"learning_rate": (1e-3, 3e-4)},
        progress=False,
    )
    assert result.metrics["train/loss"].shape == (2, 6)
    expected = [512 * i for i in (2, 3, 4, 6)]
    csv_rows = lines(tmp_path / "run" / "metrics.csv")[1:]
    assert [int(row.split(",")[4]) for row in csv_rows] == [s for s in expected for _ in (0, 1)]
    jsonl = [json.loads(line) for line in lines(tmp_path / "run" / "metrics.jsonl")]
    assert [obj["env_steps"] for obj in jsonl] == [s for s in expected for _ in (0, 1)]
    tb = tmp_path / "run" / "tb"
    names = ["seed0-learning_rate=0.0003", "seed0-learning_rate=0.001"]
    assert sorted(p.name for p in tb.iterdir()) == names
    for name in names:
        assert [s for s, _ in kept_scalars(tb / name)["train/loss"]] == expected
