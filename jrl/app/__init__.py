"""The application layer: training runs and what they leave behind.

:mod:`~jrl.app.api` (``jrl.train``, ``resume``, ``load_run``, ``evaluate_run``) runs them
through :mod:`~jrl.app.execution` and :mod:`~jrl.app.chunk_work`, with the run's options
and record in :mod:`~jrl.app.run_options`, its folder in :mod:`~jrl.app.run_folder`,
checkpoints in :mod:`~jrl.app.checkpoint`, metric logs in :mod:`~jrl.app.sinks`;
:mod:`~jrl.app.export` and :mod:`~jrl.app.render` turn a trained run into a policy file
or a video, :mod:`~jrl.app.search` searches hyperparameters in batches of runs, and
:mod:`~jrl.app.cli` is the ``jrl`` command line. Each module is reachable
as an attribute without importing it first (``jrl.app.api``).
"""

from jrl.util.submodules import lazy_submodules

__getattr__ = lazy_submodules(__name__)
