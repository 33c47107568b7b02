"""The application layer: training runs and what they leave behind.

:mod:`~jrl.app.api` (``jrl.train``, ``resume``, ``load_run``, ``evaluate_run``) runs them
through :mod:`~jrl.app.execution` and :mod:`~jrl.app.chunk_work`, with the run's options
and record in :mod:`~jrl.app.run_options`, its folder in :mod:`~jrl.app.run_folder`,
checkpoints in :mod:`~jrl.app.checkpoint`, metric logs in :mod:`~jrl.app.sinks`;
:mod:`~jrl.app.export` and :mod:`~jrl.app.render` turn a trained run into a policy file
or a video, and :mod:`~jrl.app.cli` is the ``jrl`` command line. Each module is reachable
as an attribute without importing it first (``jrl.app.api``).
"""

import importlib
import importlib.util


def __getattr__(name: str):
    """The modules of ``jrl.app`` as attributes, imported at their first use (``import jrl``
    and ``jrl --help`` import none of them)."""
    if not name.startswith("_") and importlib.util.find_spec(f"jrl.app.{name}") is not None:
        return importlib.import_module(f"jrl.app.{name}")
    raise AttributeError(f"module 'jrl.app' has no attribute {name!r}")
