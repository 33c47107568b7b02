"""What tools/mutation.py mutates: the target files and functions, and the tests run against
each target's mutants (see mutation.py's docstring).

Targets (:func:`targets`): the modules of :data:`CORE` (every function), the functions that
:data:`SHARED` names in shared agent code and in the library's layers (a ``make_*`` function
there is mutated in its nested :data:`NESTED` functions only), and the loss and target code of
every agent module named in ``jrl.agents.BUILTIN``: its top-level functions whose names contain
``loss``, ``target``, ``advantage`` or ``head``, and the functions named in :data:`NESTED`
nested in its ``make_*`` functions. A target's tests are :data:`TESTS`' entry for its file (an
agent module without one: ``tests/test_<module>.py``), always without the ``learning`` tests;
a new agent module without loss or target code or without tests fails the check."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

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
    "jrl/parts/buffers.py": (
        "trajectory_buffer",
        "_sample_sequences",
        "uniform_buffer",
        "_uniform_slots",
        "prioritized_buffer",
        "_prioritized_init",
        "_prioritized_sample",
        "_add_rows",
        "_write",
    ),
    "jrl/parts/sum_tree.py": (
        "sum_tree_size",
        "_tree_layout",
        "_sum_children",
        "_pairwise_sum",
        "sum_tree_from_leaves",
        "_levels_above",
        "tree_set",
        "tree_find",
    ),
    "jrl/parts/nstep.py": ("trajectory_nsteps", "nstep_accumulator", "_push"),
    "jrl/parts/learner.py": (
        "scheduled_lr",
        "apply_gradients",
        "minibatch_epochs",
        "epsilon_schedule",
    ),
    "jrl/parts/optim.py": ("make_optimizer", "grad_norm_metric", "linear_schedule"),
    "jrl/core/normalization.py": (
        "RunningMeanStd.update",
        "RunningMeanStd.merge",
        "_update_unless_frozen",
        "NormalizeObservation._normalize",
        "NormalizeReward.step",
    ),
    "jrl/run/anakin.py": ("chunk_lengths", "_remaining_chunks"),
    "agents/search/mcts.py": (
        "game_recurrent_fn",
        "q_transform",
        "search",
        "_root_search",
        "_one_search",
        "search_from_roots",
    ),
    "agents/search/arena.py": ("random_player", "perfect_player", "play_games", "game_report"),
    "jrl/run/loops.py": (
        "_OnPolicyLoop.step",
        "_on_policy_init",
        "ReplayUpdates.update",
        "ReplayUpdates.learn_phase",
        "ReplayUpdates.skip_phase",
        "_OffPolicyLoop.env_step",
        "_OffPolicyLoop.init",
        "_OffPolicyLoop.step",
    ),
    "jrl/run/sebulba/transfers.py": (
        "compress",
        "compress_trajectory",
        "compress_items",
        "expand",
        "nbytes",
    ),
    "jrl/run/sebulba/actors.py": ("Store.publish", "Store.wait", "ActorThread._params"),
    "jrl/run/ray_actors.py": ("RayPool.publish", "RayPool.restarts"),
    "agents/evolution/strategies.py": ("normalize_observation", "policy_action", "make_es"),
    "agents/evolution/population.py": (
        "play_members",
        "_fold_moments",
        "_gather",
        "_check_population",
        "population",
    ),
    "jrl/run/pbt.py": ("check_pbt", "check_loop_state", "every_iterations", "with_pbt", "lineage"),
    "agents/value/common.py": ("update_target", "greedy_next_actions", "acting_epsilon"),
    "agents/value/r2d2.py": ("sequence_q_targets", "sequence_loss", "q_unroll", "make_r2d2"),
    "agents/multi_agent/common.py": (
        "agent_gae",
        "MultiAgentActorCritic.policy",
        "MultiAgentActorCritic.value",
        "build_multi_agent",
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
AGENT_EXTRA = {
    "agents/search/muzero.py": (
        "_model",
        "_model_unroll",
        "_muzero_agent",
        "_search_runner",
        "_scale_gradient",
    ),
    "agents/search/alphazero.py": (
        "_alphazero_agent",
        "_search_runner",
        "_self_play_move",
        "_self_play_step",
        "_stored",
        "_finished_games",
    ),
    "agents/value/dqn.py": ("_epsilon_greedy_act", "_greedy_policy", "with_acting_epsilon"),
}
"""Agent modules' other numerical code (self-play, unrolls, search runners, acting), mutated
in addition to their loss and target code."""
"""Agent modules whose own numerical code sits in top-level functions named otherwise (Ape-X's
exploration rates and actor-side priorities; its loss is dqn.py's): mutated instead."""

AWAITING_FULL_RUN: dict[str, tuple[str, ...]] = {}
"""Functions newly made targets whose mutants have not all been killed yet (empty since
2026-12-05: issue 45's new agents' mutants were all killed or proved equivalent). The CI
rotation leaves them out, so that a commit's slice does not fail on mutants nobody has
looked at; ``--all`` and ``--target`` run them. An entry is removed once ``python
tools/mutation.py --target FILE`` kills (or proves equivalent) every mutant of its
functions. A name matches a mutant's function (the id's second field) and every function
nested in it."""

SAMPLE = 260
"""The most mutants a slice of the rotation holds (a default run, the CI check): about 1.5 CPU
seconds a mutant, 3.5 minutes on 2 idle cores."""
FAST = ["-m", "not learning"]
TESTS: dict[str, list[str]] = {
    "jrl/ops/losses.py": ["tests/test_losses.py", "tests/test_ppo.py", "tests/test_a2c.py"],
    "jrl/ops/returns.py": [
        "tests/test_returns.py",
        "tests/test_reinforce.py::test_monte_carlo_advantages_by_hand",
        "tests/test_pqn.py::test_q_lambda_targets_by_hand",
        "tests/test_pqn.py::test_q_lambda_targets_limits",
        # vtrace's own checks against a numpy reference
        "tests/test_impala.py::test_vtrace_advantages_by_hand",
        "tests/test_impala.py::test_learn_under_policy_lag_matches_numpy_vtrace",
        "tests/test_impala.py::test_recurrent_learner_corrects_for_the_lag_of_its_unrolled_policy",
    ],
    "jrl/ops/action_distributions.py": [
        "tests/test_distributions.py",
        "tests/test_exact_boundaries.py::test_normal_sample_is_mean_plus_std_times_the_keys_standard_normal",
        "tests/test_exact_boundaries.py::test_epsilon_greedy_explores_only_below_epsilon",
        "tests/test_exact_boundaries.py::test_masked_logit_is_minus_1e9_or_half_the_lowest_float",
    ],
    "jrl/ops/return_distributions.py": [
        "tests/test_distributional.py",
        "tests/test_dqn.py::test_categorical_head_by_hand",
        "tests/test_dqn.py::test_quantile_head_by_hand",
        "tests/test_muzero.py::test_value_transform_and_two_hot_by_hand",
        "tests/test_muzero.py::test_unrolled_loss_by_hand",
    ],
    "agents/search/muzero.py": [
        "tests/test_exact_muzero.py",
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
        "tests/test_actor_critic.py::test_recurrent_actor_critic_honours_the_action_mask",
    ],
    "jrl/core/two_player_env.py": [
        "tests/test_alphazero.py::test_player_returns_and_targets_by_hand"
    ],
    "agents/search/mcts.py": [
        "tests/test_exact_search.py",
        "tests/test_alphazero.py::test_recurrent_fn_rewards_discounts_and_values_by_hand",
        "tests/test_alphazero.py::test_search_finds_the_winning_move_and_the_block",
        "tests/test_alphazero.py::test_q_transform_fixed_bounds_and_per_node_rescaling_by_hand",
        "tests/test_alphazero.py::test_puct_q_bounds",
    ],
    "agents/search/alphazero.py": [
        "tests/test_exact_selfplay.py",
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
        "tests/test_dqn.py::test_epsilon_greedy_per_env_draws",
        "tests/test_dqn.py::test_act_respects_the_action_mask",
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
        "tests/test_exact_replay_agents.py::test_epsilon_greedy_explores_with_the_act_key_itself",
    ],
    "agents/value/common.py": [
        "tests/test_exact_learner.py::test_acting_epsilon_decays_over_the_runs_updates_by_hand",
        "tests/test_exact_learner.py::test_greedy_next_actions_online_or_target_over_valid_actions",
        "tests/test_dqn.py::test_masked_bootstrap_action",
        "tests/test_dqn.py::test_target_updates_hard_and_polyak",
        "tests/test_dqn.py::test_learn_matches_a_numpy_reference",
    ],
    "agents/value/r2d2.py": [
        "tests/test_r2d2.py::test_sequence_loss_by_hand",
        "tests/test_r2d2.py::test_stored_states_restart_with_every_episode_and_replay_from_the_first",
        "tests/test_r2d2.py::test_sequence_q_targets_mask_the_bootstrap_action",
        "tests/test_exact_replay_agents.py::test_r2d2_learn_on_batch_major_sequences_by_hand",
    ],
    "jrl/parts/buffers.py": [
        "tests/test_exact_buffers.py",
        "tests/test_buffers.py::test_uniform_circular_wraparound",
        "tests/test_buffers.py::test_uniform_samples_filled_slots_uniformly",
        "tests/test_buffers.py::test_add_rejects_bad_batches",
        "tests/test_buffers.py::test_sum_tree_totals_updates_and_new_items_at_max_priority",
        "tests/test_buffers.py::test_importance_weights_hand_computed_and_beta_traced_under_jit",
        "tests/test_buffers.py::test_prioritized_frequencies_match_priorities",
        "tests/test_buffers.py::test_prioritized_step_updates_the_sum_tree_in_place",
        "tests/test_buffers.py::test_prioritized_single_slot",
        "tests/test_buffers.py::test_uniform_stratified_by_env",
        "tests/test_buffers.py::test_uniform_stratified_bad_input",
        "tests/test_buffers.py::test_vmapped_buffers_are_independent_per_seed",
        "tests/test_buffers.py::test_trajectory_sequences_contiguous_in_time_order",
        "tests/test_buffers.py::test_trajectory_stratified_sequences_by_hand",
        "tests/test_buffers.py::test_trajectory_buffer_with_a_single_start",
        "tests/test_buffers.py::test_memory_check_refuses_before_allocating",
    ],
    "jrl/parts/nstep.py": [
        "tests/test_exact_buffers.py::test_nstep_window_count_stays_below_two_n",
        "tests/test_exact_buffers.py::test_nstep_gamma_must_lie_in_0_1",
        "tests/test_apex.py::test_trajectory_nsteps_match_explicit_loops_and_the_accumulator",
        "tests/test_buffers.py::test_nstep_hand_computed_at_episode_ends",
        "tests/test_buffers.py::test_nstep_matches_n_step_returns_with_traced_gamma",
    ],
    "jrl/parts/sum_tree.py": [
        "tests/test_exact_buffers.py",
        "tests/test_buffers.py::test_sum_tree_totals_updates_and_new_items_at_max_priority",
        "tests/test_buffers.py::test_importance_weights_hand_computed_and_beta_traced_under_jit",
        "tests/test_buffers.py::test_sum_tree_matches_numpy_above_the_dense_top_levels",
        "tests/test_buffers.py::test_descent_matches_a_binary_sum_tree",
        "tests/test_buffers.py::test_prioritized_step_updates_the_sum_tree_in_place",
        "tests/test_buffers.py::test_prioritized_single_slot",
        "tests/test_buffers.py::test_prioritized_sampling_is_a_log_depth_descent",
    ],
    "jrl/parts/learner.py": [
        "tests/test_exact_learner.py",
        "tests/test_buffers.py::test_minibatch_epochs_visit_every_sample_once_per_epoch",
    ],
    "jrl/parts/optim.py": ["tests/test_exact_learner.py", "tests/test_optim.py"],
    "jrl/core/normalization.py": [
        "tests/test_exact_normalization.py",
        "tests/test_wrappers.py::test_normalize_observation_statistics_and_output",
        "tests/test_wrappers.py::test_normalize_observation_unbatched_and_clip",
        "tests/test_wrappers.py::test_normalize_observation_freeze",
        "tests/test_wrappers.py::test_normalize_observation_axis_name_merges_devices",
        "tests/test_wrappers.py::test_normalize_reward",
        "tests/test_wrappers.py::test_normalize_reward_resets_at_truncation_and_clips",
        "tests/test_wrappers.py::test_normalize_reward_frozen",
        "tests/test_wrappers.py::test_normalize_reward_batch_statistics",
    ],
    "jrl/run/loops.py": [
        "tests/test_exact_loops.py",
        "tests/test_dqn.py::test_off_policy_loop_counts_and_determinism",
    ],
    "jrl/run/sebulba/transfers.py": [
        "tests/test_exact_sebulba.py",
        "tests/test_sebulba.py::test_bfloat16_transfers_halve_the_float_bytes",
    ],
    "jrl/run/sebulba/actors.py": [
        "tests/test_exact_sebulba.py",
        "tests/test_sebulba.py::test_staleness_bounds_the_policy_lag_and_a_held_learner_reaches_the_bound",
    ],
    "jrl/run/ray_actors.py": [
        "tests/test_exact_ray_pool.py",  # the Ray tests start Ray: too slow for every mutant
    ],
    "agents/search/arena.py": [
        "tests/test_exact_arena.py",
        "tests/test_alphazero.py::test_perfect_play_values",
        "tests/test_alphazero.py::test_play_games_between_baselines",
    ],
    "jrl/run/anakin.py": [
        "tests/test_exact_anakin.py",
        "tests/test_actor_critic.py::test_chunk_lengths_cover_all_iterations",
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
        "tests/test_exact_pbt.py",
        "tests/test_pbt.py::test_the_worst_runs_copy_the_best_and_perturb_their_hyperparameters",
        "tests/test_pbt.py::test_copies_draw_from_the_whole_top_fraction_and_both_factors",
        "tests/test_pbt.py::test_lineage_lists_every_copy_with_the_hyperparameters_after_it",
        "tests/test_pbt.py::test_refused_settings_name_the_sweepable_fields",
        "tests/test_pbt.py::test_pbt_runs_are_not_independent_so_the_runner_never_spreads_them",
    ],
    "agents/evolution/population.py": [
        "tests/test_exact_boundaries.py::test_folding_an_empty_sample_leaves_the_statistics_bit_identical",
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
        "tests/test_exact_loops.py::test_team_builder_clips_normal_actions_and_reads_rank_two_observations",
    ],
    "agents/offline/bc.py": [
        "tests/test_offline.py::test_behaviour_cloning_loss_by_hand",
        "tests/test_offline.py::test_one_learn_step_counts_moves_the_target_and_reports_by_hand",
        "tests/test_offline.py::test_an_interrupted_and_resumed_offline_run_equals_the_whole_run",
    ],
    "agents/offline/cql.py": [
        "tests/test_offline.py::test_cql_loss_by_hand",
        "tests/test_offline.py::test_one_learn_step_counts_moves_the_target_and_reports_by_hand",
        "tests/test_offline.py::test_cql_behaviour_policy_samples_softmax_q",
    ],
    "agents/offline/iql.py": [
        "tests/test_offline.py::test_expectile_loss_by_hand",
        "tests/test_offline.py::test_advantage_weighted_loss_by_hand",
        "tests/test_offline.py::test_iql_loss_by_hand",
        "tests/test_offline.py::test_one_learn_step_counts_moves_the_target_and_reports_by_hand",
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
        functions = AGENT_FUNCTIONS.get(path) or agent_functions(path) + AGENT_EXTRA.get(path, ())
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
