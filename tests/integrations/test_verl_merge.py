"""``agentgrpo verl-merge``: a veRL FSDP checkpoint of the tiny policy → an HF directory that
``agentgrpo eval`` runs.

The checkpoint is written the way veRL's ``FSDPCheckpointManager`` writes one rank's
share under FSDP2 (``global_step_N/actor/model_world_size_1_rank_0.pt`` of DTensors sharded
on dim 0, ``fsdp_config.json``, the HF config and tokenizer in ``huggingface/``,
``latest_checkpointed_iteration.txt`` in the run directory), in a one-process gloo group on
127.0.0.1. veRL's own merger (CPU) then joins it; nothing is mocked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from agentgrpo.cli import main  # noqa: E402
from agentgrpo.config import MissingFileError  # noqa: E402
from agentgrpo.integrations.verl.merge import actor_dir  # noqa: E402
from agentgrpo.policy.hf import load_policy, read_agent_config  # noqa: E402

WRITE_SHARDS = """
import json, os, socket, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from safetensors.torch import load_file

source, actor = sys.argv[1], sys.argv[2]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
state = load_file(os.path.join(source, "model.safetensors"))
shards = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in state.items()}
torch.save(shards, os.path.join(actor, "model_world_size_1_rank_0.pt"))
json.dump({"FSDP_version": 2, "world_size": 1}, open(os.path.join(actor, "fsdp_config.json"), "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def verl_run(tiny_policy_dir, tmp_path_factory) -> Path:
    """A veRL run directory with the tiny policy saved as step 3's FSDP actor checkpoint."""
    run = tmp_path_factory.mktemp("verl_run")
    actor = run / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for item in tiny_policy_dir.iterdir():
        if item.suffix != ".safetensors" and item.name != "agentgrpo.json" and item.is_file():
            shutil.copy(item, actor / "huggingface" / item.name)
    done = subprocess.run([sys.executable, "-c", WRITE_SHARDS, str(tiny_policy_dir), str(actor)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (run / "latest_checkpointed_iteration.txt").write_text("3")
    return run


@pytest.mark.slow  # veRL's merger in its own interpreter, then an evaluation: ~35 s on 2 shared cores
def test_merged_checkpoint_loads_with_the_trained_weights_and_evaluates(verl_run, tiny_policy_dir, tmp_path):
    out = tmp_path / "merged"
    assert main(["verl-merge", "--checkpoint", str(verl_run), "--out", str(out)]) == 0

    merged, _ = load_policy(out)
    original, _ = load_policy(tiny_policy_dir)
    for (name, a), (_, b) in zip(sorted(merged.state_dict().items()), sorted(original.state_dict().items())):
        # veRL's merger saves bfloat16
        torch.testing.assert_close(a, b.to(torch.bfloat16).float(), msg=name)
    config = read_agent_config(out)
    assert config["prompt_style"] == "full"  # what verl-prepare's rows show the policy
    assert config["verl_checkpoint"] == str((verl_run / "global_step_3" / "actor").resolve())

    from helpers import SMALL_ENV_OVERRIDES

    eval_dir = tmp_path / "eval"
    rc = main(["eval", "--policy", str(out), "--trials", "1", "--out", str(eval_dir), *SMALL_ENV_OVERRIDES,
               "splits=[unseen]", "rollout.max_turns=2", "rollout.max_new_tokens=8"])
    assert rc == 0
    report = json.loads((eval_dir / "eval.json").read_text())
    assert report["split_sizes"] == {"unseen": 4}


def test_checkpoint_paths_resolve_and_bad_ones_are_named(verl_run, tmp_path):
    actor = verl_run / "global_step_3" / "actor"
    assert actor_dir(verl_run) == actor  # latest_checkpointed_iteration.txt
    assert actor_dir(verl_run, step=3) == actor
    assert actor_dir(verl_run / "global_step_3") == actor
    assert actor_dir(actor) == actor
    with pytest.raises(MissingFileError, match="global_step_3"):
        actor_dir(verl_run, step=9)
    with pytest.raises(MissingFileError, match="no veRL FSDP actor checkpoint"):
        actor_dir(tmp_path)


def test_incomplete_checkpoint_is_one_line_naming_the_missing_shard(verl_run, tmp_path, capsys):
    broken = tmp_path / "actor"
    shutil.copytree(verl_run / "global_step_3" / "actor", broken)
    (broken / "model_world_size_1_rank_0.pt").unlink()
    assert main(["verl-merge", "--checkpoint", str(broken), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model_world_size_1_rank_0.pt" in err[0]


def test_help_works_without_verl_and_a_merge_says_how_to_get_it(tmp_path):
    code = f"""
import sys
sys.modules["verl"] = None  # import verl -> ImportError, as on a machine without veRL
from agentgrpo.cli import main
try:
    main(["verl-merge", "--help"])
except SystemExit as e:
    assert e.code == 0, e.code
sys.exit(main(["verl-merge", "--checkpoint", {str(tmp_path)!r}, "--out", {str(tmp_path / "out")!r}]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "--checkpoint" in run.stdout  # the --help text
    assert "pip install 'agentgrpo[verl]'" in run.stderr.strip().splitlines()[-1]
