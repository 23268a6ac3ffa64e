"""What schema-guided decoding costs: rollout tokens/s with and without the tool-call grammar.

The engine runs the same GRPO batch as ``rollout.py`` (4 tasks × 8 episodes of the generated
airline world, the scripted user, up to 8 turns of up to 64 tokens, temperature 0.5, the
trained benchmark policy) three ways: free, ``rollout.constrain_tool_calls`` (the grammar's
mask on every token) and with ``rollout.copy_arguments`` too (a grammar per turn, its copied
arguments limited to the conversation's words). The episodes differ between modes (the
masks change the draws), so the figure is sampled tokens per second of the whole rollout,
environment included. Then the trainer's side: replaying the constrained batch's turns for
their masks (``train.batch.replay_masks``), microseconds per sampled token.

Run: ``python benchmarks/constrained_decoding.py [--policy DIR|random] [--quick]`` (about 3
minutes on 2 quiet cores, plus about 2 the first time, to train the policy). Ends with BENCH lines.
"""

from __future__ import annotations

import argparse

from _common import add_policy_arguments, airline_specs, bench, median, rollout_workload, set_threads, timed

from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import RolloutEngine
from agentgrpo.train.batch import replay_masks

MODES = {"free": {}, "schema": {"constrain_tool_calls": True},
         "schema+copy": {"constrain_tool_calls": True, "copy_arguments": True}}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_policy_arguments(parser)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--reps", type=int, default=3, help="timed runs per mode (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke size: 2 tasks x 4, 3 turns x 32 tokens")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.group_size, args.max_turns, args.max_new_tokens, args.reps = 2, 4, 3, 32, 1
    return args


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    env_config, bundle, tasks, model, chat = rollout_workload(args)
    rates, last = {}, {}
    for mode, options in MODES.items():
        config = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, max_total_tokens=4096,
                               temperature=args.temperature, **options)
        engine = RolloutEngine(model, chat, config)
        engine.run(airline_specs(bundle, env_config, tasks[:1], 1, 1, args.seed), seed=args.seed)  # warm-up
        per_second = []
        for rep in range(args.reps):
            specs = airline_specs(bundle, env_config, tasks, args.group_size, args.max_turns, args.seed)
            trajectories, seconds = timed(lambda engine=engine, specs=specs: engine.run(specs, seed=args.seed))
            tokens = engine.last_stats.policy_tokens
            calls = sum(step.kind == "tool" for t in trajectories for step in t.steps)
            malformed = sum(t.num_invalid for t in trajectories)
            print(f"  {mode} run {rep + 1}: {tokens} sampled tokens in {seconds:.2f} s, {calls} well-formed calls, "
                  f"{malformed} malformed turns")
            per_second.append(tokens / seconds)
        rates[mode] = median(per_second)
        last[mode] = (engine, trajectories)
        print(f"{mode}: {rates[mode]:.1f} sampled tokens/s")
    replay = {}
    for mode in ("schema", "schema+copy"):
        engine, trajectories = last[mode]
        width = max(len(t.token_ids) for t in trajectories)
        masks, seconds = timed(lambda t=trajectories, w=width, g=engine.grammar: replay_masks(t, w, g))
        sampled = sum(t.num_response_tokens for t in trajectories)
        replay[mode] = 1e6 * seconds / max(sampled, 1)
        print(f"mask replay ({mode}): {sampled} sampled tokens in {seconds:.3f} s, "
              f"{masks.table.shape[0]} distinct masks")
    bench("free_rollout_tokens_per_s", rates["free"])
    bench("constrained_vs_free_tokens_per_s", rates["schema"] / rates["free"], ">= 0.5")
    bench("copy_constrained_vs_free_tokens_per_s", rates["schema+copy"] / rates["free"], ">= 0.4")
    # the trainer's side, once per batch before the update (train_step.py gives the update's own time)
    bench("mask_replay_us_per_token", replay["schema"], "<= 200")
    bench("copy_mask_replay_us_per_token", replay["schema+copy"], "<= 500")


if __name__ == "__main__":
    main()
