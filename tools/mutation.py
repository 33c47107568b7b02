"""Mutation check of jrl's numerical core: do the fast tests notice a wrong operator, sign or
constant?

Each *mutant* is one small change to the code of a target function: an arithmetic operator
swapped (``+``/``-``, ``*``/``/``, ``**`` -> ``*``), a sign dropped (``-x`` -> ``x``), a
comparison moved across its boundary (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is
not``), a logical operator swapped (``&``/``|``, ``and``/``or``, ``~x``/``not x`` -> ``x``),
the condition of an ``if`` or of ``a if c else b`` negated, a number increased by one, a
boolean flipped, a reduction or selection swapped (``minimum``/``maximum``, ``min``/``max``,
``argmax``/``argmin``, ``mean``/``sum``), the branches of a ``where`` swapped, or a
``stop_gradient`` dropped. The mutant is applied in memory only: the function's ``__code__``
is replaced by the mutated compilation, so every reference to the function sees it (``from
... import`` copies included) and the tree is never written. Then the target's fast tests run
in-process (``pytest -x``, the tests that name the mutated function first); a mutant is
*killed* when a test fails (or it runs past ``--timeout``), and *survives* when they all pass.

The check fails when a mutant survives that is not listed in ``tools/mutation_equivalents.txt``
with a one-line reason (a mutant that cannot change behaviour, e.g. ``<`` -> ``<=`` where both
sides are never equal), when a listed mutant no longer exists (a stale entry), or when a
target's tests fail without any mutant. Listed mutants are not run.

Targets (:func:`targets`): ``jrl/ops/losses.py``, ``returns.py``, ``distributions.py``,
``distributional.py`` (every function), the shared actor-critic code (``gae``, the loss,
update and learn steps of ``make_actor_critic`` and the helpers they share with the recurrent
agent, and ``recurrent_unroll``), and the loss and target code of every agent
module named in ``jrl.agents.BUILTIN``: its top-level functions whose names contain ``loss``,
``target``, ``advantage`` or ``head``, and the functions named ``loss``, ``loss_fn``,
``sgd_step`` and ``learn`` nested in its ``make_*`` functions. An agent module's tests are
``tests/test_<module>.py`` without the ``learning`` tests, unless :data:`TESTS` names a faster
selection; a new agent module without loss or target code or without tests fails the check.

When there are more mutants than ``--sample`` (default 260: about 3.5 minutes on 2 idle cores),
a fixed-seed sample is drawn, stratified so that every target file gets its share.

Usage::

    python tools/mutation.py                 # the CI check (2 workers)
    python tools/mutation.py --list          # every mutant id, with its line
    python tools/mutation.py --only ID ...   # run these mutants (e.g. to confirm a kill)
    python tools/mutation.py --all           # every mutant, no sampling
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EQUIVALENTS = Path(__file__).with_name("mutation_equivalents.txt")

CORE = (
    "jrl/ops/losses.py",
    "jrl/ops/returns.py",
    "jrl/ops/action_distributions.py",
    "jrl/ops/return_distributions.py",
)
"""Modules mutated whole."""
SHARED = {
    "agents/actor_critic/common.py": (
        "gae",
        "make_actor_critic",
        "_normalized",
        "_with_learner_outputs",
        "_sgd_step",
        "_learned",
        "recurrent_unroll",
    ),
    "agents/continuous/common.py": (
        "ActionScale.to_env",
        "ActionScale.to_unit",
        "polyak",
        "critic_target",
        "critic_loss",
        "critic_subset",
        "subset_key",
        "ou_step",
        "uniform_warmup",
        "make_deterministic_losses",
        "make_deterministic",
    ),
    "jrl/core/two_player_env.py": ("player_returns",),
    "jrl/parts/buffers.py": ("trajectory_buffer", "_sample_sequences"),
    "jrl/parts/nstep.py": ("trajectory_nsteps",),
    "agents/search/mcts.py": ("game_recurrent_fn", "q_transform"),
    "agents/evolution/strategies.py": ("normalize_observation", "policy_action", "make_es"),
    "agents/evolution/population.py": (
        "play_members",
        "_fold_moments",
        "_gather",
        "_check_population",
        "population",
    ),
    "jrl/run/pbt.py": ("check_pbt", "check_loop_state", "every_iterations", "with_pbt", "lineage"),
    "agents/value/common.py": ("update_target",),
    "agents/value/r2d2.py": ("sequence_q_targets", "sequence_loss"),
    "agents/multi_agent/common.py": (
        "agent_gae",
        "MultiAgentActorCritic.policy",
        "MultiAgentActorCritic.value",
    ),
}
"""Shared agent code: these top-level functions and methods (of a ``make_*`` function, its
nested update code, see NESTED)."""
SHARED_AGENTS = {
    "agents/continuous/td3.py": "agents/continuous/common.py",
    "agents/continuous/ddpg.py": "agents/continuous/common.py",
    "agents/evolution/es.py": "agents/evolution/strategies.py",
    "agents/multi_agent/ippo.py": "agents/multi_agent/common.py",
    "agents/multi_agent/mappo.py": "agents/multi_agent/common.py",
}
"""Agent modules whose loss and target code is all shared code (a config, presets and a
``build`` only): checked through that file's target instead."""
NESTED = (
    "loss",
    "loss_fn",
    "sgd_step",
    "learn",
    "critic_loss_fn",
    "actor_loss_fn",
    "smoothed_target_action",
    "ask",
    "tell",
    "member_action",
)
"""Functions nested in a ``make_*`` function that hold an agent's loss and target code."""
AGENT_WORDS = ("loss", "target", "advantage", "head")
"""An agent module's top-level functions whose names contain one of these are mutated."""
AGENT_FUNCTIONS = {"agents/value/apex.py": ("apex_epsilons", "initial_priorities")}
"""Agent modules whose own numerical code sits in top-level functions named otherwise (Ape-X's
exploration rates and actor-side priorities; its loss is dqn.py's): mutated instead."""

SAMPLE = 260
"""Mutants a CI run samples (of about 400): about 384 CPU seconds, 3.5 minutes on 2 idle cores."""
FAST = ["-m", "not learning"]
TESTS: dict[str, list[str]] = {
    "jrl/ops/losses.py": ["tests/test_losses.py", "tests/test_ppo.py", "tests/test_a2c.py"],
    "jrl/ops/returns.py": [
        "tests/test_returns.py",
        "tests/test_reinforce.py::test_monte_carlo_advantages_by_hand",
        "tests/test_pqn.py::test_q_lambda_targets_by_hand",
        "tests/test_pqn.py::test_q_lambda_targets_limits",
    ],
    "jrl/ops/action_distributions.py": ["tests/test_distributions.py"],
    "jrl/ops/return_distributions.py": [
        "tests/test_distributional.py",
        "tests/test_dqn.py::test_categorical_head_by_hand",
        "tests/test_dqn.py::test_quantile_head_by_hand",
        "tests/test_muzero.py::test_value_transform_and_two_hot_by_hand",
        "tests/test_muzero.py::test_unrolled_loss_by_hand",
    ],
    "agents/search/muzero.py": [
        "tests/test_muzero.py::test_value_targets_by_hand",
        "tests/test_muzero.py::test_value_targets_bootstrap_without_an_end",
        "tests/test_muzero.py::test_unrolled_loss_by_hand",
    ],
    "agents/actor_critic/common.py": [
        "tests/test_ppo.py",
        "tests/test_a2c.py",
        "tests/test_reinforce.py::test_monte_carlo_advantages_by_hand",
        "tests/test_reinforce.py::test_loss_is_policy_gradient_plus_weighted_baseline_loss",
        "tests/test_reinforce.py::test_learn_matches_a_numpy_reference",
        "tests/test_recurrent.py::test_learner_replays_what_the_agent_acted_on",
        "tests/test_impala.py::test_learn_under_policy_lag_matches_numpy_vtrace",
    ],
    "jrl/core/two_player_env.py": [
        "tests/test_alphazero.py::test_player_returns_and_targets_by_hand"
    ],
    "agents/search/mcts.py": [
        "tests/test_alphazero.py::test_recurrent_fn_rewards_discounts_and_values_by_hand",
        "tests/test_alphazero.py::test_search_finds_the_winning_move_and_the_block",
        "tests/test_alphazero.py::test_q_transform_fixed_bounds_and_per_node_rescaling_by_hand",
        "tests/test_alphazero.py::test_puct_q_bounds",
    ],
    "agents/search/alphazero.py": [
        "tests/test_alphazero.py::test_player_returns_and_targets_by_hand",
        "tests/test_alphazero.py::test_loss_by_hand",
        "tests/test_alphazero.py::test_replay_targets_span_rollouts_by_hand",
    ],
    "agents/actor_critic/reinforce.py": [
        "tests/test_reinforce.py::test_monte_carlo_advantages_by_hand",
        "tests/test_reinforce.py::test_loss_is_policy_gradient_plus_weighted_baseline_loss",
        "tests/test_reinforce.py::test_learn_matches_a_numpy_reference",
    ],
    "agents/actor_critic/impala.py": [
        "tests/test_impala.py::test_vtrace_advantages_by_hand",
        "tests/test_impala.py::test_loss_by_hand",
        "tests/test_impala.py::test_learn_under_policy_lag_matches_numpy_vtrace",
        "tests/test_impala.py::test_recurrent_learner_corrects_for_the_lag_of_its_unrolled_policy",
    ],
    "agents/value/dqn.py": [
        "tests/test_dqn.py::test_double_q_target_by_hand",
        "tests/test_dqn.py::test_nstep_target_truncation_bootstraps",
        "tests/test_dqn.py::test_target_updates_hard_and_polyak",
        "tests/test_dqn.py::test_scalar_head_loss_and_priority_by_hand",
        "tests/test_dqn.py::test_heads_hold_the_target_constant",
        "tests/test_dqn.py::test_categorical_head_by_hand",
        "tests/test_dqn.py::test_quantile_head_by_hand",
        "tests/test_dqn.py::test_masked_bootstrap_action",
        "tests/test_dqn.py::test_learn_matches_a_numpy_reference",
        "tests/test_r2d2.py::test_sequence_loss_by_hand",
        "tests/test_r2d2.py::test_stored_states_restart_with_every_episode_and_replay_from_the_first",
    ],
    "agents/value/common.py": [
        "tests/test_dqn.py::test_target_updates_hard_and_polyak",
        "tests/test_dqn.py::test_learn_matches_a_numpy_reference",
    ],
    "agents/value/r2d2.py": [
        "tests/test_r2d2.py::test_sequence_loss_by_hand",
        "tests/test_r2d2.py::test_stored_states_restart_with_every_episode_and_replay_from_the_first",
        "tests/test_r2d2.py::test_sequence_q_targets_mask_the_bootstrap_action",
    ],
    "jrl/parts/buffers.py": [
        "tests/test_buffers.py::test_trajectory_sequences_contiguous_in_time_order",
        "tests/test_buffers.py::test_trajectory_stratified_sequences_by_hand",
        "tests/test_buffers.py::test_trajectory_buffer_with_a_single_start",
        "tests/test_buffers.py::test_memory_check_refuses_before_allocating",
    ],
    "jrl/parts/nstep.py": [
        "tests/test_apex.py::test_trajectory_nsteps_match_explicit_loops_and_the_accumulator",
    ],
    "agents/value/apex.py": [
        "tests/test_apex.py::test_apex_epsilons_follow_the_papers_schedule_and_reach_the_actors",
        "tests/test_apex.py::test_actor_priorities_are_the_td_errors_of_the_acting_parameters",
    ],
    "agents/continuous/common.py": [
        "tests/test_continuous.py",
        "tests/test_td3.py",
    ],
    "agents/evolution/strategies.py": [  # the in-process tests (no subprocesses)
        "tests/test_es.py::test_openai_es_generation_matches_a_numpy_reference",
        "tests/test_es.py::test_snes_generation_matches_a_numpy_reference",
        "tests/test_es.py::test_cma_es_mean_is_the_weighted_recombination_of_the_best_half",
        "tests/test_es.py::test_policy_acts_argmax_or_rescaled_tanh_on_normalised_observations",
        "tests/test_es.py::test_behaviour_policy_is_the_means_policy",
        "tests/test_es.py::test_a_generation_updates_the_mean_and_counts_steps_and_sweeps_the_rate",
    ],
    "jrl/run/pbt.py": [
        "tests/test_pbt.py::test_the_worst_runs_copy_the_best_and_perturb_their_hyperparameters",
        "tests/test_pbt.py::test_copies_draw_from_the_whole_top_fraction_and_both_factors",
        "tests/test_pbt.py::test_lineage_lists_every_copy_with_the_hyperparameters_after_it",
        "tests/test_pbt.py::test_refused_settings_name_the_sweepable_fields",
        "tests/test_pbt.py::test_pbt_runs_are_not_independent_so_the_runner_never_spreads_them",
    ],
    "agents/evolution/population.py": [
        "tests/test_es.py::test_truncation_probe_episode_masking_and_observation_moments",
        "tests/test_es.py::test_observation_statistics_fold_in_the_generations_observations",
        "tests/test_es.py::test_population_plays_the_env_params_it_is_given",
        "tests/test_es.py::test_a_generation_updates_the_mean_and_counts_steps_and_sweeps_the_rate",
        "tests/test_es.py::test_population_not_divisible_by_devices_is_refused",
        "tests/test_es.py::test_interrupted_run_resumes_bit_identical",
    ],
    "agents/continuous/sac.py": [
        "tests/test_sac.py::test_actor_loss_by_hand",
        "tests/test_sac.py::test_alpha_loss_by_hand",
        "tests/test_sac.py::test_learn_matches_a_reference",
    ],
    "agents/multi_agent/common.py": [
        "tests/test_ippo.py::test_agent_gae_by_hand",
        "tests/test_ippo.py::test_network_shares_or_splits_parameters",
        "tests/test_ippo.py::test_centralised_critic_reads_the_global_state_only",
        "tests/test_ippo.py::test_acting_honours_every_agents_mask",
    ],
    "agents/value/pqn.py": [
        "tests/test_pqn.py::test_q_lambda_targets_by_hand",
        "tests/test_pqn.py::test_q_lambda_targets_limits",
        "tests/test_pqn.py::test_learn_targets_use_parameters_from_before_the_update",
        "tests/test_pqn.py::test_learn_matches_a_numpy_reference",
    ],
}
"""Target file -> the tests run against its mutants (in this order, stopping at the first
failure); always with ``-m "not learning"``."""


# --------------------------------------------------------------------------------- targets


@dataclasses.dataclass(frozen=True)
class Target:
    path: str  # relative to the repository
    module: str  # its import name
    functions: tuple[str, ...] | None  # top-level qualnames to mutate (None: all)
    nested: tuple[str, ...] | None  # inside make_* functions, only these nested functions
    tests: tuple[str, ...]


def module_name(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    return ".".join(("jrl", *parts) if parts[0] == "agents" else parts)  # jrl.agents.<module>


def agent_modules() -> list[str]:
    """``agents/<family>/<module>.py`` of every built-in agent, in registry order."""
    import jrl.agents

    seen: list[str] = []
    for spec in jrl.agents.BUILTIN.values():
        path = "agents/" + "/".join(spec.split(":")[0].split(".")[2:]) + ".py"
        if path not in seen:
            seen.append(path)
    return seen


def agent_functions(path: str) -> tuple[str, ...]:
    tree = ast.parse((REPO / path).read_text())
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if any(w in node.name for w in AGENT_WORDS):
            out.append(node.name)
        elif node.name.startswith("make_") and any(
            isinstance(n, ast.FunctionDef) and n.name in NESTED for n in ast.walk(node)
        ):
            out.append(node.name)
    return tuple(out)


def targets() -> list[Target]:
    out = [Target(p, module_name(p), None, None, tuple(TESTS[p])) for p in CORE]
    for path, functions in SHARED.items():
        out.append(Target(path, module_name(path), functions, NESTED, tuple(TESTS[path])))
    for path in agent_modules():
        if path in SHARED_AGENTS:
            continue
        functions = AGENT_FUNCTIONS.get(path) or agent_functions(path)
        if not functions:
            raise SystemExit(
                f"mutation: {path} has no loss or target code this check recognises (top-level "
                f"functions named with {AGENT_WORDS}, or {NESTED} nested in a make_* function)"
            )
        tests = TESTS.get(path) or [f"tests/test_{Path(path).stem}.py"]
        missing = [t for t in tests if not (REPO / t.split("::")[0]).is_file()]
        if missing:
            raise SystemExit(
                f"mutation: {path}: no test file {missing}; add one or map it in TESTS"
            )
        out.append(Target(path, module_name(path), functions, NESTED, tuple(tests)))
    return out


# --------------------------------------------------------------------------------- mutants


@dataclasses.dataclass
class Mutant:
    id: str
    target: str  # Target.path
    qualname: str  # the top-level function (or Class.method) whose code is replaced
    line: int  # absolute line, for display
    original: str  # the source line
    mutated: str  # the mutated node, unparsed
    node: int  # the node's index in ast.walk(module), to mutate it again in a worker
    desc: str  # the mutation


SWAP_BINOP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.Pow: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
}
SWAP_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
SWAP_NAMES = {
    "minimum": "maximum",
    "maximum": "minimum",
    "min": "max",
    "max": "min",
    "argmax": "argmin",
    "argmin": "argmax",
    "mean": "sum",
    "sum": "mean",
}


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _skipped_ids(func: ast.AST) -> set[int]:
    """Nodes never mutated: docstrings, defaults, annotations, decorators, strings."""
    skip: set[int] = set()

    def drop(node):
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for d in [*args.defaults, *args.kw_defaults]:
                drop(d)
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None:
                    drop(a.annotation)
            if not isinstance(node, ast.Lambda):
                drop(node.returns)
                for d in node.decorator_list:
                    drop(d)
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                ):
                    drop(body[0])
        elif isinstance(node, ast.AnnAssign):
            drop(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            drop(node)
        elif isinstance(node, ast.Raise):  # the message of an error, not its condition
            drop(node)
    return skip


def _edits(node: ast.AST):
    """``(description, apply(node_copy))`` for each mutation of ``node``."""
    if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BINOP:
        new = SWAP_BINOP[type(node.op)]
        yield f"{type(node.op).__name__}-to-{new.__name__}", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.AugAssign) and type(node.op) in SWAP_BINOP:
        new = SWAP_BINOP[type(node.op)]
        yield f"{type(node.op).__name__}=-to-{new.__name__}=", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert, ast.Not)):
        yield f"drop-{type(node.op).__name__}", None  # replaced by its operand (see _mutate)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
        new = SWAP_CMP[type(node.ops[0])]
        yield (
            f"{type(node.ops[0]).__name__}-to-{new.__name__}",
            lambda n: setattr(n, "ops", [new()]),
        )
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{type(node.op).__name__}-to-{new.__name__}", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value + 1
        yield f"{node.value!r}-to-{value!r}", lambda n: setattr(n, "value", value)
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield f"{node.value}-to-{not node.value}", lambda n: setattr(n, "value", not n.value)
    elif isinstance(node, (ast.If, ast.IfExp)):

        def negate(n):
            n.test = ast.UnaryOp(ast.Not(), n.test)

        yield "negate-condition", negate
    elif isinstance(node, ast.Call):
        name = _call_name(node)
        if name in SWAP_NAMES:
            new_name = SWAP_NAMES[name]

            def rename(n, new_name=new_name):
                if isinstance(n.func, ast.Attribute):
                    n.func.attr = new_name
                else:
                    n.func.id = new_name

            yield f"{name}-to-{new_name}", rename
        elif name == "where" and len(node.args) == 3:

            def swap(n):
                n.args[1], n.args[2] = n.args[2], n.args[1]

            yield "where-swap", swap
        elif name == "stop_gradient" and len(node.args) == 1:
            yield "drop-stop_gradient", None


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise RuntimeError("node not found in its parent")


def _functions(tree: ast.Module, target: Target):
    """``(qualname, node)`` of the top-level functions and methods to mutate."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if target.functions is None or node.name in target.functions:
                yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                name = f"{node.name}.{item.name}" if isinstance(item, ast.FunctionDef) else None
                if name and (target.functions is None or name in target.functions):
                    yield name, item


def _regions(func: ast.FunctionDef, target: Target) -> list[tuple[str, ast.AST]]:
    """``(name, node)`` of the parts of ``func`` to mutate: the whole function, or in a
    ``make_*`` function of an agent only its nested loss/update functions."""
    if target.nested is None or not func.name.startswith("make_"):
        return [(func.name, func)]
    return [
        (n.name, n) for n in ast.walk(func) if isinstance(n, ast.FunctionDef) and n.name in NESTED
    ]


def _innermost(region: ast.AST, node: ast.AST, prefix: str) -> tuple[str, int]:
    """The dotted name and first line of the innermost def of ``region`` holding ``node``."""
    best, best_line, best_depth = prefix, region.lineno, 0

    def visit(n, name, depth):
        nonlocal best, best_line, best_depth
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef):
                inner = f"{name}.{child.name}"
                if any(x is node for x in ast.walk(child)) and depth + 1 > best_depth:
                    best, best_line, best_depth = inner, child.lineno, depth + 1
                visit(child, inner, depth + 1)
            else:
                visit(child, name, depth)

    visit(region, prefix, 0)
    return best, best_line


def enumerate_mutants(target: Target) -> list[Mutant]:
    source = (REPO / target.path).read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    index = {id(n): i for i, n in enumerate(ast.walk(tree))}
    out: list[Mutant] = []
    for qualname, func in _functions(tree, target):
        skip = _skipped_ids(func)
        for region_name, region in _regions(func, target):
            prefix = qualname if region is func else f"{qualname}.{region_name}"
            for node in ast.walk(region):
                if id(node) in skip or not hasattr(node, "lineno"):
                    continue
                for desc, _ in _edits(node):
                    where, first = _innermost(region, node, prefix)
                    span = (
                        f"+{node.lineno - first}:{node.col_offset}"
                        f"..{node.end_lineno - first}:{node.end_col_offset}"
                    )
                    ident = f"{target.path}:{where}:{span}:{desc}"
                    mutated = _mutate(tree, node, desc)
                    out.append(
                        Mutant(
                            ident,
                            target.path,
                            qualname,
                            node.lineno,
                            lines[node.lineno - 1].strip(),
                            ast.unparse(mutated[1]),
                            index[id(node)],
                            desc,
                        )
                    )
    ids = [m.id for m in out]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise RuntimeError(f"duplicate mutant ids: {sorted(dupes)[:3]}")
    return out


def _mutate(tree: ast.Module, node: ast.AST, desc: str) -> tuple[ast.Module, ast.AST]:
    """A copy of ``tree`` with ``node`` mutated as ``desc`` says; and the new node."""
    memo: dict[int, ast.AST] = {}
    new_tree = copy.deepcopy(tree, memo)
    new_node = memo[id(node)]
    apply = dict(_edits(new_node))[desc]
    if apply is not None:
        apply(new_node)
        return new_tree, new_node
    replacement = new_node.operand if isinstance(new_node, ast.UnaryOp) else new_node.args[0]
    for parent in ast.walk(new_tree):
        if any(child is new_node for child in ast.iter_child_nodes(parent)):
            _replace_child(parent, new_node, replacement)
            return new_tree, replacement
    raise RuntimeError(f"cannot mutate {desc}")


def mutated_code(target: Target, mutant: Mutant):
    """The code object of ``mutant.qualname`` compiled from the mutated module."""
    tree = ast.parse((REPO / target.path).read_text())
    node = list(ast.walk(tree))[mutant.node]
    new_tree, _ = _mutate(tree, node, mutant.desc)
    ast.fix_missing_locations(new_tree)
    code = compile(new_tree, str(REPO / target.path), "exec", dont_inherit=True)

    def find(c):
        for const in c.co_consts:
            if hasattr(const, "co_qualname"):
                if const.co_qualname == mutant.qualname:
                    return const
                found = find(const)
                if found is not None:
                    return found
        return None

    found = find(code)
    if found is None:
        raise RuntimeError(f"{mutant.id}: no code object {mutant.qualname}")
    return found


def function_object(module, qualname: str):
    """The function object whose ``__code__`` holds ``qualname`` (methods and properties too)."""
    obj = module
    parts = qualname.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    attr = obj.__dict__[parts[-1]] if isinstance(obj, type) else getattr(obj, parts[-1])
    if isinstance(attr, property):
        attr = attr.fget
    elif isinstance(attr, (classmethod, staticmethod)):
        attr = attr.__func__
    return getattr(attr, "__wrapped__", attr)


# --------------------------------------------------------------------------------- worker


def test_functions(entry: str) -> list[tuple[str, str]]:
    """``(node id, source)`` of the tests an entry of :data:`TESTS` names: every ``test_*``
    function of a file, or the one ``file::test`` given."""
    path, _, name = entry.partition("::")
    source = (REPO / path).read_text()
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            if not name or node.name == name:
                out.append((f"{path}::{node.name}", ast.get_source_segment(source, node)))
    if name and not out:
        raise SystemExit(f"mutation: no test {entry}")
    return out


def ordered_tests(target: Target, qualname: str) -> list[str]:
    """The target's tests, those whose source names the mutated function (or its class) first:
    with ``-x`` a killed mutant then usually stops at its first test."""
    words = set(qualname.split("."))
    tests = [t for entry in target.tests for t in test_functions(entry)]
    named = [i for i, s in tests if any(re.search(rf"\b{re.escape(w)}\b", s) for w in words)]
    return named + [i for i, _ in tests if i not in named]


class _Plugin:
    """The worker's pytest plugin: after the test suite's conftest has set up JAX's persistent
    compilation cache, every program is written to it (not only slow ones), so a program that a
    mutant leaves unchanged is loaded after ``jax.clear_caches()`` instead of compiled again;
    and the tests that fail are recorded."""

    def __init__(self):
        self.failed: list[str] = []

    @staticmethod
    def pytest_configure(config):
        import jax

        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append(report.nodeid)


def worker(job_file: str) -> None:
    """Runs the mutants of ``job_file`` (JSON) in this process; one JSON line per event on the
    protocol stream (the original stdout), pytest's own output to /dev/null (or, with
    ``MUTATION_DEBUG`` set, its errors to stderr). At the end the tests that killed a mutant run
    once more without any: a test that fails there did not kill its mutants (``verify``)."""
    import importlib

    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    if not os.environ.get("MUTATION_DEBUG"):
        os.dup2(devnull, 2)
    os.chdir(REPO)
    import jax
    import pytest

    job = json.loads(Path(job_file).read_text())
    by_path = {t.path: t for t in targets()}

    def run_tests(tests, stop_early=True) -> tuple[int, list[str]]:
        plugin = _Plugin()
        first = ["-x"] if stop_early else []
        args = [*first, "-q", "-p", "no:cacheprovider", "-o", "addopts=", *FAST, *tests]
        return int(pytest.main(args, plugins=[plugin])), plugin.failed

    def say(**event):
        protocol.write(json.dumps(event) + "\n")

    killers: set[str] = set()
    for m in job["mutants"]:
        mutant = Mutant(**m)
        t = by_path[mutant.target]
        say(start=mutant.id)
        start = time.perf_counter()
        module = importlib.import_module(t.module)
        fn = function_object(module, mutant.qualname)
        original = fn.__code__
        try:
            fn.__code__ = mutated_code(t, mutant)
        except Exception as e:  # noqa: BLE001 - reported, the check fails
            say(done=mutant.id, result=f"error: {e}")
            continue
        jax.clear_caches()
        try:
            rc, failed = run_tests(ordered_tests(t, mutant.qualname))
        finally:
            fn.__code__ = original
            jax.clear_caches()
        if rc == 1 and failed:
            result = f"killed by {failed[0]}"
            killers.add(failed[0])
        else:
            result = "survived" if rc == 0 else f"error: pytest exit code {rc}"
        say(done=mutant.id, result=result, seconds=time.perf_counter() - start)
    if killers:
        start = time.perf_counter()
        _, failed = run_tests(sorted(killers), stop_early=False)
        say(verify=sorted(killers), failed=failed, seconds=time.perf_counter() - start)


# --------------------------------------------------------------------------------- driver


def read_equivalents() -> dict[str, str]:
    out = {}
    for n, line in enumerate(EQUIVALENTS.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        ident, sep, reason = line.partition("  # ")
        if not sep or not reason.strip():
            raise SystemExit(f"{EQUIVALENTS.name}:{n}: 'MUTANT_ID  # one-line reason' expected")
        out[ident.strip()] = reason.strip()
    return out


def sample(mutants: list[Mutant], size: int, seed: int) -> list[Mutant]:
    """At most ``size`` mutants, each target file's share proportional to its count (at least
    one each), drawn with ``random.Random(seed)``."""
    if len(mutants) <= size:
        return mutants
    rng = random.Random(seed)
    by_target: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_target.setdefault(m.target, []).append(m)
    chosen = []
    for path, group in by_target.items():
        k = max(1, round(size * len(group) / len(mutants)))
        chosen += rng.sample(group, min(k, len(group)))
    return sorted(chosen, key=lambda m: m.id)


def run_workers(mutants: list[Mutant], workers: int, timeout: float):
    """Runs the mutants over ``workers`` processes: ``(results, seconds, broken)``, ``broken``
    the killing tests that also failed without a mutant. A mutant that runs past ``timeout``
    seconds counts as killed (its worker is replaced)."""
    import queue
    import tempfile
    import threading

    events: queue.Queue = queue.Queue()
    results: dict[str, str] = {}
    seconds: dict[str, float] = {}
    broken: set[str] = set()
    tmp = Path(tempfile.mkdtemp(prefix="jrl-mutation-"))
    launched = 0

    def launch(todo: list[Mutant]) -> dict:
        nonlocal launched
        launched += 1
        job = tmp / f"job{launched}.json"
        job.write_text(json.dumps({"mutants": [dataclasses.asdict(m) for m in todo]}))
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "PYTHONDONTWRITEBYTECODE": "1",
            # the tests' compilation cache (tests/conftest.py), fresh for this check: mutants'
            # programs stay out of the suite's cache
            "JRL_TEST_COMPILE_CACHE": str(tmp / "jax-cache"),
        }
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(job)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        w = {"id": launched, "proc": proc, "todo": list(todo), "current": None, "since": 0.0}

        def read():
            for line in proc.stdout:
                events.put((w["id"], line))
            events.put((w["id"], None))  # end of stream

        threading.Thread(target=read, daemon=True).start()
        return w

    running = {}
    for i in range(workers):
        if mutants[i::workers]:
            w = launch(mutants[i::workers])
            running[w["id"]] = w
    while running:
        try:
            wid, line = events.get(timeout=0.5)
        except queue.Empty:
            wid, line = None, None
        if wid in running:
            w = running[wid]
            if line is None:  # the worker ended
                code = w["proc"].wait()
                for m in w["todo"]:
                    results.setdefault(m.id, f"error: worker exited with {code}")
                del running[wid]
            else:
                event = json.loads(line)
                if "verify" in event:
                    broken.update(event["failed"])
                elif "start" in event:
                    w["current"], w["since"] = event["start"], time.monotonic()
                else:
                    results[event["done"]] = event["result"]
                    seconds[event["done"]] = event.get("seconds", 0.0)
                    if len(results) % 25 == 0 or len(results) == len(mutants):
                        print(f"mutation: {len(results)}/{len(mutants)} mutants run", flush=True)
                    w["todo"] = [m for m in w["todo"] if m.id != event["done"]]
                    w["current"] = None
        for wid, w in list(running.items()):
            if w["current"] is not None and time.monotonic() - w["since"] > timeout:
                w["proc"].kill()
                w["proc"].wait()
                results[w["current"]] = "killed (timeout)"
                seconds[w["current"]] = timeout
                todo = [m for m in w["todo"] if m.id != w["current"]]
                del running[wid]
                if todo:
                    new = launch(todo)
                    running[new["id"]] = new
    return results, seconds, broken


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Mutation check of jrl's numerical core.")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--list", action="store_true", help="list every mutant and exit")
    p.add_argument("--only", nargs="+", default=None, help="run only these mutant ids")
    p.add_argument("--all", action="store_true", help="every mutant, no sampling")
    p.add_argument("--sample", type=int, default=SAMPLE, help="at most this many mutants")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant")
    p.add_argument("--json", default=None, help="write the results to this file")
    a = p.parse_args(argv)
    if a.worker:
        worker(a.worker)
        return 0
    start = time.perf_counter()
    all_targets = targets()
    mutants = [m for t in all_targets for m in enumerate_mutants(t)]
    known = {m.id for m in mutants}
    if a.list:
        for m in mutants:
            print(f"{m.id}\n    {m.line}: {m.original}\n    -> {m.mutated}")
        print(f"{len(mutants)} mutants")
        return 0
    equivalents = read_equivalents()
    stale = sorted(set(equivalents) - known)
    if a.only:
        unknown = sorted(set(a.only) - known)
        if unknown:
            raise SystemExit(f"unknown mutant ids: {unknown}")
        chosen = [m for m in mutants if m.id in set(a.only)]
    else:  # the listed equivalents are known to survive: not run again
        candidates = [m for m in mutants if m.id not in equivalents]
        chosen = candidates if a.all else sample(candidates, a.sample, a.seed)
    print(
        f"mutation: {len(mutants)} mutants in {len(all_targets)} files, {len(equivalents)} listed "
        f"as equivalent; running {len(chosen)} with {a.workers} workers",
        flush=True,
    )
    results, seconds, broken = run_workers(chosen, a.workers, a.timeout)
    failed = False
    if broken:
        print(f"mutation: these tests fail without any mutant, so they kill nothing: {broken}")
    for m in chosen:  # a kill by a test that fails anyway is no kill
        r = results.get(m.id, "")
        if r.startswith("killed by ") and r.removeprefix("killed by ") in broken:
            results[m.id] = f"error: {r}, which fails without the mutant too"
    rows = []
    counts = {"killed": 0, "equivalent": 0, "survived": 0, "error": 0}
    for m in chosen:
        r = results.get(m.id, "error: no result")
        if r.startswith("killed"):
            kind = "killed"
        elif r == "survived":
            kind = "equivalent" if m.id in equivalents else "survived"
        else:
            kind = "error"
        counts[kind] += 1
        rows.append(
            {**dataclasses.asdict(m), "result": r, "kind": kind, "seconds": seconds.get(m.id)}
        )
        if kind in ("survived", "error"):
            failed = True
            print(f"{kind.upper()}: {m.id}\n    {m.line}: {m.original}\n    -> {m.mutated}  ({r})")
    live = len(chosen) - counts["equivalent"]
    rate = counts["killed"] / live if live else 1.0
    elapsed = time.perf_counter() - start
    per_file = {}
    for row in rows:
        c = per_file.setdefault(
            row["target"], {"killed": 0, "equivalent": 0, "survived": 0, "error": 0}
        )
        c[row["kind"]] += 1
    for path, c in per_file.items():
        print(
            f"  {path:24s} {sum(c.values()):4d} mutants: {c['killed']} killed, "
            f"{c['equivalent']} equivalent, {c['survived']} survived, {c['error']} errors"
        )
    print(
        f"mutation: {counts['killed']} of {live} mutants run killed ({100 * rate:.1f}%); "
        f"{counts['survived']} survived, {counts['error']} errors; {len(equivalents)} of the "
        f"{len(mutants)} mutants listed as equivalent; {elapsed:.0f} s"
    )
    if stale and not a.only:
        print(f"mutation: {EQUIVALENTS.name} lists mutants that no longer exist: {stale}")
        failed = True
    if a.json:
        Path(a.json).write_text(
            json.dumps({"rows": rows, "broken": sorted(broken), "seconds": elapsed}, indent=1)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
