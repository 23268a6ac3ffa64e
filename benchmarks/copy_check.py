"""Does a policy read ids from its context? SFT's copy check on any checkpoint or model preset.

The check (``agentgrpo.train.copy_check``) reads oracle demonstrations of validation tasks from
held-out worlds, teacher-forced, and scores the model's argmax at the tokens of every id a tool
call copies from what the user or a tool said:

- ``id``: the whole id right;
- ``first``: its first token right (choosing which id: the context holds many);
- ``continue``: the tokens after the first right, the prefix given (copying on from where the id
  was read; a model with an in-context copy circuit is near 1 here).

Each policy is scored with its own tokenizer on the same demonstrations. A built preset from
scratch has no weights worth scoring; pass its SFT checkpoint. A pretrained preset
(``smollm2-135m``) is scored as it ships, with the compact prompt, which gives the ceiling a
pretrained copy circuit sets before any training.

    python benchmarks/copy_check.py runs/i20/sft_w12_ctx/final smollm2-135m --tasks 16
    python benchmarks/copy_check.py runs/quickstart/sft/final --renumber-slots  # copying, not the usual slot
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgrpo.agent.chat import ChatFormat  # noqa: E402
from agentgrpo.config import AgentGRPOError, load_config  # noqa: E402
from agentgrpo.envs.registry import build_env  # noqa: E402
from agentgrpo.policy.hf import load_policy, read_agent_config, resolve_view  # noqa: E402
from agentgrpo.policy.presets import PRESETS  # noqa: E402
from agentgrpo.train.copy_check import copy_accuracy  # noqa: E402
from agentgrpo.train.demonstrations import copy_probes  # noqa: E402
from agentgrpo.train.sft_config import SFTConfig  # noqa: E402
from benchmarks._common import bench  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policies", nargs="+", help="checkpoint directories or pretrained preset names")
    parser.add_argument("--tasks", type=int, default=16, help="validation tasks from held-out worlds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--renumber-slots", action="store_true",
                        help="delexicalised policies: renumber each demonstration's slots at random, so the "
                             "usual slot (<U1>, <R1>) scores only by chance and only copying does")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(SFTConfig, [f"data.copy_check_tasks={args.tasks}", "run_dir=runs/bench/copy_check"],
                         defaults="sft.yaml")
    bundle = build_env(config.env)
    requested = config.env  # each policy's own view when unset
    print("| policy | ids | token acc | id acc | first-token acc | continuation acc | seconds |")
    print("|---|---|---|---|---|---|---|")
    scores = {}
    for source in args.policies:
        preset = PRESETS.get(source)
        if preset is not None and preset.kind == "built":
            raise SystemExit(f"{source}: a built preset has random weights; pass its SFT checkpoint instead")
        try:
            model, tokenizer = load_policy(source)
        except AgentGRPOError as e:  # a missing checkpoint or an unknown name: one line, not a traceback
            raise SystemExit(f"{source}: {e}") from None
        style = "compact" if preset is not None else read_agent_config(source)["prompt_style"]
        chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style=style)
        config.env = resolve_view(requested, source)  # the probes in the policy's view
        renumber = random.Random(0) if args.renumber_slots and config.env.delexicalise else None
        probes, skipped = copy_probes(config, bundle, chat, renumber)
        if skipped:
            raise SystemExit(f"copy check unavailable: {skipped}")
        start = time.perf_counter()
        score = copy_accuracy(model, probes)
        scores[source] = score
        print(f"| {source} | {score.ids} | {score.token_accuracy:.3f} | {score.id_accuracy:.3f} | "
              f"{score.first_accuracy:.3f} | {score.continue_accuracy:.3f} | {time.perf_counter() - start:.0f} |",
              flush=True)
    for source, score in scores.items():
        name = Path(source).parent.name if Path(source).name == "final" else Path(source).name
        bench(f"copy_id_acc_{name}", score.id_accuracy, "info")
        bench(f"copy_continue_acc_{name}", score.continue_accuracy, "info")


if __name__ == "__main__":
    main()
