"""How well do checkpoints still fit the oracle's demonstrations, split by split?

The demonstration term (``trainer.demo_coef``) replays the training worlds' oracle demonstrations;
this scores the same demonstrations under each checkpoint, teacher-forced in float32: the
token-mean NLL of the assistant turns (the SFT loss) over ``--n`` demonstrations of each split,
the same ones for every checkpoint. ``covered_seen`` is the SFT's own data, so its NLL rising
after GRPO is displacement from the SFT; ``uncovered_seen`` holds the families SFT never saw
demonstrated. ``--config`` is a GRPO run's ``config.yaml`` (its worlds, oracle and prompt).

    python benchmarks/demo_nll.py --config runs/smol-calc-grpo-wfd/config.yaml \\
        runs/smol-calc/final runs/smol-calc-grpo/final runs/smol-calc-grpo-wfd/final

Ends with ``BENCH demo_nll_covered_ratio``: the last checkpoint's covered_seen NLL over the first's.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgrpo.config import AgentGRPOError, load_config  # noqa: E402
from agentgrpo.policy.forward import PolicyForward  # noqa: E402
from agentgrpo.train.grpo import GRPOTrainer  # noqa: E402
from agentgrpo.train.grpo_config import GRPOConfig  # noqa: E402
from agentgrpo.train.sft import collate_examples  # noqa: E402
from benchmarks._common import bench  # noqa: E402

SPLITS = ("covered_seen", "uncovered_seen")


def split_nll(checkpoint: str, config_file: str, n: int) -> dict[str, float]:
    """Token-mean NLL of ``n`` demonstrations of each split (seeded draw in task-id order) under ``checkpoint``."""
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(GRPOConfig, [f"policy.init={checkpoint}", f"run_dir={run_dir}", "algo.kl_coef=0",
                                          "trainer.demo_coef=1", f"trainer.demo_splits=[{','.join(SPLITS)}]"],
                             config_file=config_file)
        trainer = GRPOTrainer(config)
        forward = PolicyForward(trainer.model, autocast=())  # float32
        pool = list(zip(trainer.demo_replay.task_ids, trainer.demo_replay.examples))
        result = {}
        for split in SPLITS:
            ids = {t.task_id for world in trainer.groups.worlds for t in world.tasks([split])}
            part = sorted((p for p in pool if p[0] in ids), key=lambda p: p[0])
            nll, weight = 0.0, 0.0
            with torch.no_grad():
                for _, example in random.Random(0).sample(part, min(n, len(part))):
                    input_ids, attention_mask, labels = collate_examples([example], trainer.groups.chat.pad_token_id)
                    logprobs = forward.token_logprobs(input_ids, attention_mask, labels).logprobs
                    nll -= float((logprobs * labels).sum())
                    weight += float(labels.sum())
            result[split] = nll / max(weight, 1.0)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="checkpoint directories, the baseline first")
    parser.add_argument("--config", required=True, help="a GRPO run's config.yaml (worlds, oracle, prompt)")
    parser.add_argument("--n", type=int, default=24, help="demonstrations per split (default 24)")
    args = parser.parse_args()
    try:
        rows = [(checkpoint, split_nll(checkpoint, args.config, args.n)) for checkpoint in args.checkpoints]
    except AgentGRPOError as e:  # a missing config or checkpoint: one line, not a traceback
        raise SystemExit(f"demo_nll: {e}") from None
    print(f"| checkpoint | {' | '.join(SPLITS)} |\n|---|{'---|' * len(SPLITS)}")
    for checkpoint, nll in rows:
        print(f"| {checkpoint} | {' | '.join(f'{nll[s]:.4f}' for s in SPLITS)} |")
    bench("demo_nll_covered_ratio", rows[-1][1]["covered_seen"] / rows[0][1]["covered_seen"])


if __name__ == "__main__":
    main()
