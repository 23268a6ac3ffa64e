"""The packaged YAMLs state only what differs from their dataclasses: a value that repeats
the default beneath it (the dataclass's, or the YAML layer a file is applied over) is two
places for one number, which drift apart; every key must exist in the schema."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentgrpo.config import CONFIG_DIR, ConfigError, from_dict, to_dict
from agentgrpo.eval.config import EvalConfig
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft import SFTConfig

EXPERIMENTS = sorted((CONFIG_DIR / "experiment").glob("*.yaml"))
# file -> (schema, the layers it is applied over, in order)
LAYERS: dict[Path, tuple[type, list[Path]]] = {
    CONFIG_DIR / "grpo.yaml": (GRPOConfig, []),
    **{path: (GRPOConfig, [CONFIG_DIR / "grpo.yaml"]) for path in EXPERIMENTS},
    CONFIG_DIR / "sft.yaml": (SFTConfig, []),
    CONFIG_DIR / "eval.yaml": (EvalConfig, []),
    CONFIG_DIR / "eval_tau_bench.yaml": (EvalConfig, [CONFIG_DIR / "eval.yaml"]),
}


def _data(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}


def _leaves(data: dict, prefix: str = "") -> dict[str, object]:
    leaves: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            leaves.update(_leaves(value, f"{prefix}{key}."))
        else:
            leaves[prefix + key] = value
    return leaves


def _without(data: dict, dotted: str) -> dict:
    """``data`` less the leaf ``dotted``, and less the sections that leaves empty."""
    head, _, rest = dotted.partition(".")
    if not rest:
        return {k: v for k, v in data.items() if k != head}
    inner = _without(data[head], rest)
    return {**{k: v for k, v in data.items() if k != head}, **({head: inner} if inner else {})}


def _resolved(schema: type, layers: list[dict]) -> dict:
    """The config ``load_config`` builds from these YAML layers, as plain data."""
    merged = OmegaConf.merge(*(OmegaConf.create(layer) for layer in layers)) if layers else OmegaConf.create()
    return to_dict(from_dict(schema, OmegaConf.to_container(merged, resolve=True)))


def test_every_packaged_yaml_is_covered():
    packaged = {p for p in CONFIG_DIR.rglob("*.yaml") if p.parent.name != "ablate"}  # ablate: job plans
    assert packaged == set(LAYERS)


def _loads_alike(schema: type, layers: list[dict], loaded: dict) -> bool:
    try:
        return _resolved(schema, layers) == loaded
    except ConfigError:  # needed: without it the config is invalid (e.g. a micro-batch the batch must hold)
        return False


@pytest.mark.parametrize("path", sorted(LAYERS), ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_a_yaml_states_only_what_differs_from_the_defaults_beneath_it(path):
    """Each key must change the loaded config: without it, the dataclass default (or a layer
    below) gives the same value. (A section a file names starts from its own class's defaults,
    not from the parent's ``default_factory``: removing a key is what measures it.)"""
    schema, below = LAYERS[path]
    layers, data = [_data(p) for p in below], _data(path)
    loaded = _resolved(schema, [*layers, data])  # also: every key exists in the schema, typed
    repeated = [key for key in _leaves(data) if _loads_alike(schema, [*layers, _without(data, key)], loaded)]
    assert not repeated, f"{path.name} repeats the value beneath it (the {schema.__name__} default" \
        f"{' or ' + ', '.join(p.name for p in below) if below else ''}): {repeated}"


def test_the_verl_config_leaves_the_experiments_numbers_to_agentgrpo_hosts():
    """airline_grpo.yaml holds what the cluster shapes; what ``agentgrpo hosts verl`` writes (the
    objective and the batch geometry) is not in it, except the estimator veRL needs a name for."""
    from agentgrpo.integrations.host_settings import load_native, verl_settings

    verl_yaml = CONFIG_DIR.parent / "integrations" / "verl" / "configs" / "airline_grpo.yaml"
    stated = _leaves(_data(verl_yaml))
    written = {item.split("=", 1)[0] for item in verl_settings(load_native()).overrides}
    assert written & set(stated) == {"algorithm.adv_estimator"}
    assert stated["algorithm.adv_estimator"] == "agentgrpo_" + GRPOConfig().algo.adv_estimator
