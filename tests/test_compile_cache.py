"""The persistent compilation cache: where it goes, how it is turned off, and that a second
process loads the program instead of compiling it (subprocesses: the cache is per process)."""

import json
import os
import subprocess
import sys

import pytest

from jrl.app import compile_cache

SCRIPT = """
import json, sys
import jax
from jrl.app import compile_cache
print(json.dumps({"dir": str(compile_cache.enable())}))
"""


def _run(script, env, timeout=300):
    base = {k: v for k, v in os.environ.items() if k not in ("JRL_COMPILE_CACHE", "XDG_CACHE_HOME")}
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, "JAX_PLATFORMS": "cpu", **env},
    )


def test_default_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_dir() == tmp_path / "jrl" / "jax-cache"


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/jrl/jax-cache"),
        ({"JRL_COMPILE_CACHE": "{tmp}/mine"}, "{tmp}/mine"),
        ({"JRL_COMPILE_CACHE": "off", "XDG_CACHE_HOME": "{tmp}/xdg"}, "None"),
        ({"JRL_COMPILE_CACHE": "0", "XDG_CACHE_HOME": "{tmp}/xdg"}, "None"),
    ],
)
def test_where_the_cache_goes(tmp_path, env, expected):
    env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
    out = _run(SCRIPT, env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["dir"] == expected.format(tmp=tmp_path)
    if expected != "None":
        assert os.path.isdir(expected.format(tmp=tmp_path))


def test_a_directory_chosen_for_jax_is_kept(tmp_path):
    script = (
        "import jax\njax.config.update('jax_compilation_cache_dir', %r)\n" % str(tmp_path / "given")
        + SCRIPT
    )
    out = _run(script, {"JRL_COMPILE_CACHE": str(tmp_path / "ignored")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["dir"] == str(tmp_path / "given")
    assert not (tmp_path / "ignored").exists()


@pytest.mark.parametrize(
    "given,expected", [("", compile_cache.MIN_COMPILE_SECONDS), (", min_compile_seconds=2.5", 2.5)]
)
def test_the_write_threshold_is_jrls_unless_given(tmp_path, given, expected):
    script = (
        "import jax, json\nfrom jrl.app import compile_cache\n"
        f"compile_cache.enable({str(tmp_path)!r}{given})\n"
        "print(json.dumps(jax.config.jax_persistent_cache_min_compile_time_secs))"
    )
    out = _run(script, {})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_a_directory_chosen_for_jax_keeps_its_threshold(tmp_path):
    script = (
        "import jax, json\nfrom jrl.app import compile_cache\n"
        f"jax.config.update('jax_compilation_cache_dir', {str(tmp_path)!r})\n"
        "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.25)\n"
        "compile_cache.enable()\n"
        "print(json.dumps(jax.config.jax_persistent_cache_min_compile_time_secs))"
    )
    out = _run(script, {})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == 0.25


TRAIN = """
import collections, json, jax, jrl
from jrl.app import compile_cache
events = collections.Counter()
jax.monitoring.register_event_listener(lambda name, **kw: events.update([name]))
# an eager op compiles (and initialises JAX's cache) before the cache is turned on
jax.numpy.ones(3) + 1
# every program is written, so whether one is does not hang on how long it took to compile on a
# loaded machine (a program near the threshold was written by one run and not the other);
# train() keeps this directory and its threshold
compile_cache.enable(%r, min_compile_seconds=0)
r = jrl.train("ppo", "CartPole-v1", total_steps=2048, num_envs=4, num_steps=32, progress=False,
              num_reports=1, compile_cache=%r)
print(json.dumps({"hits": events.get("/jax/compilation_cache/cache_hits", 0),
                  "writes": events.get("/jax/compilation_cache/cache_misses", 0)}))
"""


def _cache_files(cache):
    return {p.name for p in os.scandir(cache)}


def test_second_process_loads_the_program(tmp_path):
    """Run 1 writes the compiled PPO programs to the cache; run 2 (a fresh process) loads them
    from it and compiles nothing worth writing. (What that saves in seconds is measured by
    benchmarks/compile_cache.py, not asserted here: a clock on a loaded 2-core machine flakes.)"""
    cache = str(tmp_path / "cache")
    first = _run(TRAIN % (cache, cache), {})
    assert first.returncode == 0, first.stderr[-2000:]
    written = _cache_files(cache)
    one = json.loads(first.stdout.strip().splitlines()[-1])
    assert one["writes"] >= 1 and written, one  # JAX's cache-miss event is its write
    second = _run(TRAIN % (cache, cache), {})
    assert second.returncode == 0, second.stderr[-2000:]
    two = json.loads(second.stdout.strip().splitlines()[-1])
    assert two["hits"] >= one["writes"] and two["writes"] == 0, (one, two)
    assert _cache_files(cache) == written


def test_cli_flags(tmp_path):
    """``--compile-cache-dir`` puts the cache there; ``--no-compile-cache`` writes none."""
    args = [
        "train",
        "ppo",
        "--total-steps",
        "2048",
        "--num-envs",
        "4",
        "--num-steps",
        "32",
        "--quiet",
        "--num-reports",
        "1",
    ]
    base = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    main = "import sys; from jrl.app.cli import main; sys.exit(main(sys.argv[1:]))"
    on = subprocess.run(
        [
            sys.executable,
            "-c",
            main,
            *args,
            "--out",
            str(tmp_path / "a"),
            "--compile-cache-dir",
            str(tmp_path / "cc"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "JRL_COMPILE_CACHE"}, **base},
    )
    assert on.returncode == 0, on.stderr[-2000:]
    assert any(os.scandir(tmp_path / "cc"))
    off = subprocess.run(
        [sys.executable, "-c", main, *args, "--out", str(tmp_path / "b"), "--no-compile-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "JRL_COMPILE_CACHE"}, **base},
    )
    assert off.returncode == 0, off.stderr[-2000:]
    assert not (tmp_path / "xdg" / "jrl").exists()  # (matplotlib may keep its font cache under xdg)
