"""``agentgrpo verl-prepare``: write the airline task files veRL's RL dataset reads.

One parquet row per task, in veRL's RLHF layout:

* ``data_source``: ``agentgrpo/airline``; ``ability``: ``agent``;
* ``agent_name``: ``agentgrpo_airline`` (the agent loop of ``configs/agent_loop.yaml``);
* ``prompt``: ``[{"role": "system", "content": <policy + tool schemas>}]`` — the user's
  first message comes from the user simulator at rollout time; storing the real system
  prompt lets veRL's prompt-length filter see the true size;
* ``reward_model``: ``{"style": "rule", "ground_truth": <task id>}``;
* ``extra_info``: ``index``, ``split``, ``task_id``, ``family`` and ``env_config`` (the
  environment config as JSON, so every Ray worker rebuilds the same world and task).

Files, one per set and never mixed (DESIGN §7.1):

* ``train.parquet``: covered_seen + uncovered_seen (the seed's 16 + 24);
* ``val.parquet``: the validation split (``splits.validation``: training families, never
  trained on; 8 generated tasks by default, on τ-bench held out of uncovered_seen). veRL's
  ``data.val_files``: what ``trainer.test_freq`` evaluates and the checkpoint is chosen by;
* ``test.parquet``: unseen (10), evaluated once per chosen checkpoint by ``agentgrpo eval``
  after training — never ``val_files`` (the launch check refuses it);
* one ``<split>.parquet`` per split, and ``manifest.json``.

The environment is configured like every other job (``agentgrpo.envs.config.EnvConfig``)
with ``key=value`` overrides, e.g. ``source=tau_bench data_dir=... user.kind=llm``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

from agentgrpo.agent.chat import build_system_prompt
from agentgrpo.config import AgentGRPOError, load_config
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import (
    SPLIT_NAMES,
    TRAIN_SPLITS,
    VALIDATION_SPLIT,
    EnvBundle,
    build_env,
)
from agentgrpo.integrations.verl.episode import ENV_CONFIG_KEY, TASK_ID_KEY, env_config_json

DATA_SOURCE = "agentgrpo/airline"
AGENT_NAME = "agentgrpo_airline"
TEST_SPLITS = ("unseen",)
FILES: dict[str, tuple[str, ...]] = {
    "train": TRAIN_SPLITS,
    "val": (VALIDATION_SPLIT,),
    "test": TEST_SPLITS,
    **{name: (name,) for name in (*SPLIT_NAMES, VALIDATION_SPLIT)},
}


def task_rows(
    bundle: EnvBundle, config: EnvConfig, split_names: tuple[str, ...]
) -> list[dict[str, Any]]:
    """The dataset rows of the tasks in ``split_names`` (in split order)."""
    domain = bundle.domain
    system_prompt = build_system_prompt(domain.policy, domain.tool_schemas())
    config_json = env_config_json(config)
    rows = []
    for split in split_names:
        for task in bundle.splits[split]:
            rows.append(
                {
                    "data_source": DATA_SOURCE,
                    "agent_name": AGENT_NAME,
                    "prompt": [{"role": "system", "content": system_prompt}],
                    "ability": "agent",
                    "reward_model": {"style": "rule", "ground_truth": task.task_id},
                    "extra_info": {
                        "index": len(rows),
                        "split": split,
                        TASK_ID_KEY: task.task_id,
                        "family": task.family,
                        ENV_CONFIG_KEY: config_json,
                    },
                }
            )
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(path))


def prepare(config: EnvConfig, out_dir: str | Path) -> dict[str, Any]:
    """Write every file of ``FILES`` and ``manifest.json`` into ``out_dir``; return the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bundle = build_env(config)
    manifest: dict[str, Any] = {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "split_sizes": bundle.split_sizes,
        "files": {},
        "env_config": json.loads(env_config_json(config)),
    }
    for name, splits in FILES.items():
        rows = task_rows(bundle, config, splits)
        write_parquet(rows, out / f"{name}.parquet")
        manifest["files"][name] = {"splits": list(splits), "rows": len(rows)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _run(args: argparse.Namespace) -> int:
    from agentgrpo.envs.preflight import preflight_env

    config = load_config(EnvConfig, list(args.overrides))
    preflight_env(config, prefix="")
    if importlib.util.find_spec("pyarrow") is None:
        raise AgentGRPOError("verl-prepare writes parquet files with pyarrow, which is not installed: "
                             "pip install pyarrow")
    manifest = prepare(config, args.out)
    sizes = ", ".join(f"{name} {info['rows']}" for name, info in manifest["files"].items())
    print(f"wrote {args.out}: {sizes}")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``verl-prepare`` subcommand (``agentgrpo.cli`` calls this)."""
    parser = subparsers.add_parser(
        "verl-prepare",
        help="write the airline task parquet files for veRL",
        description="Write train/val/test parquet files of airline tasks in veRL's RLHF layout "
        "(val: held-out tasks of the training families, for test_freq; test: the unseen split, "
        "for `agentgrpo eval` after training).",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="environment config overrides, e.g. seed=1 source=tau_bench "
        "data_dir=/path user.kind=llm splits.validation=4",
    )
    parser.set_defaults(func=_run)

