"""Build the airline domain, its task splits and per-episode environments from a config.

Every job (SFT, GRPO, evaluation, the quickstart, the veRL data preparation) gets its
tasks the same way, through the domain registry (``env.domain=airline``, the default;
``agentgrpo.envs.airline.spec``): ``build_env(EnvConfig)`` returns the domain and the
covered_seen / uncovered_seen / unseen splits, and ``make_env`` wraps one task in an
``AirlineEnv`` with the configured user simulator. The config schema and ``EnvBundle``
are every domain's (``agentgrpo.envs.config``, ``agentgrpo.envs.registry``) and are
re-exported here.

Three sets, never mixed (DESIGN §7.1): training tasks (covered_seen + uncovered_seen),
validation tasks (``validation``: the training families, held out of training, for every
choice — checkpoint, step, hyper-parameters) and test tasks (unseen, evaluated once per
reported checkpoint). The generated source draws its validation tasks after the task
pool from the same world (``continue_tasks``), so the three splits are the same with or
without them; τ-bench's 50 tasks are all in the seed's three splits, so its validation
tasks are held out of uncovered_seen (``splits.validation=4``: 20 of its 24 are trained
on), and covered_seen and unseen stay the seed's.

Large evaluation sets come from *held-out* worlds (``build_heldout``): fresh worlds and
tasks whose seeds no training job uses, each task labelled by where its family stands in
training — covered_seen (families with demonstrations), uncovered_seen (families trained on
without demonstrations), unseen (families no training split holds), validation (the
training families, from worlds of their own, never the test worlds).

An LLM user talks through a chat client that ``make_env`` is given (``user_client``;
jobs build it once with ``agentgrpo.openai_client.llm_user_client(config.user)``),
so the environment package never imports ``agentgrpo.policy``.
"""
from __future__ import annotations

from collections.abc import Sequence

from agentgrpo.config import ConfigError, require
from agentgrpo.envs.airline.core.domain import AirlineDomain
from agentgrpo.envs.airline.core.environment import AirlineEnv
from agentgrpo.envs.airline.core.tau_bench import load_tau_bench
from agentgrpo.envs.airline.tasks.generate import FAMILY_NAMES, continue_tasks, generate_domain, split_tasks
from agentgrpo.envs.airline.tasks.world import AIRPORTS
from agentgrpo.envs.config import DEFAULT_VALIDATION, EnvConfig, SplitConfig, UserConfig, WorldConfig
from agentgrpo.envs.registry import SPLIT_NAMES, TRAIN_SPLITS, VALIDATION_SPLIT, EnvBundle
from agentgrpo.envs.types import Task
from agentgrpo.envs.user_sim import ChatClient, LLMUser, ScriptedUser

__all__ = [
    "DEFAULT_VALIDATION", "HELDOUT_SEED_BASE", "HELDOUT_TASKS_PER_FAMILY", "HELDOUT_WORLDS_PER_SEED", "SPLIT_NAMES",
    "TRAIN_SPLITS", "VALIDATION_SPLIT", "EnvBundle", "EnvConfig", "SplitConfig", "UserConfig", "WorldConfig",
    "TRAIN_WORLD_SEED_BASE", "build_env", "build_heldout", "build_training_worlds", "check_config", "check_heldout",
    "heldout_world_seed", "make_env", "split_families", "training_world_seed", "validation_tasks",
]

TRAIN_WORLD_SEED_BASE = 500_000_000
"""Seeds of the extra training worlds (``env.train_worlds`` > 1) start here: world ``w`` of
``env.seed`` s is ``base + 10_000·s + w``, apart from every ``env.seed`` a config names in
practice and below the held-out seeds."""
HELDOUT_SEED_BASE = {"test": 1_000_000_000, "validation": 2_000_000_000}
"""World (and task) seeds of held-out draws start here: test worlds and validation worlds
never share a seed, and neither meets a training world (``env.seed`` < 10**9)."""
HELDOUT_WORLDS_PER_SEED = 10_000
"""Held-out worlds one ``heldout_seed`` may use (its seeds are ``base + 10_000·seed + w``)."""
HELDOUT_TASKS_PER_FAMILY = 2
"""Tasks of each family drawn from one held-out world; the training world has ~2.5 (58
tasks, 23 families), so a held-out task is as varied as a training one and large sets
spread over many worlds instead of reusing one world's few fitting reservations."""


def check_config(config: EnvConfig) -> None:
    """The airline's own keys: ``env.world`` must size a world the generator can build."""
    world = config.world
    require(3 <= world.n_airports <= len(AIRPORTS), "env.world.n_airports", world.n_airports,
            f"must be in [3, {len(AIRPORTS)}]")
    require(world.n_flights >= 2 * world.n_airports, "env.world.n_flights", world.n_flights,
            f"must be >= 2 × env.world.n_airports ({2 * world.n_airports})")
    require(world.n_users >= 1, "env.world.n_users", world.n_users, "must be >= 1")
    require(world.n_reservations >= 0, "env.world.n_reservations", world.n_reservations, "must be >= 0")
    if config.train_worlds > 1:
        require(config.source == "generated", "env.train_worlds", config.train_worlds,
                "must be 1 with env.source=tau_bench (its one world is fixed data)")
        max_seed = (HELDOUT_SEED_BASE["test"] - TRAIN_WORLD_SEED_BASE) // HELDOUT_WORLDS_PER_SEED
        require(config.seed < max_seed, "env.seed", config.seed,
                f"must be < {max_seed} with env.train_worlds > 1 (the extra worlds' seeds derive from it)")
        require(config.train_worlds <= HELDOUT_WORLDS_PER_SEED, "env.train_worlds", config.train_worlds,
                f"must be <= {HELDOUT_WORLDS_PER_SEED}")
    require(world.n_reservations <= 3 * world.n_users, "env.world.n_reservations", world.n_reservations,
            f"must be <= 3 × env.world.n_users ({3 * world.n_users}): at most 3 reservations per user")


def check_heldout(config: EnvConfig, tasks_per_split: int) -> None:
    """Held-out tasks come from generated worlds whose seeds no training job uses."""
    require(config.source == "generated", "tasks_per_split", tasks_per_split,
            "held-out tasks need env.source=generated (τ-bench's task set is fixed); set tasks_per_split=0")
    require(config.seed < HELDOUT_SEED_BASE["test"], "env.seed", config.seed,
            f"must be < {HELDOUT_SEED_BASE['test']} with tasks_per_split > 0 (held-out worlds' seeds start "
            "there)")


def build_env(config: EnvConfig) -> EnvBundle:
    """The domain and its splits, deterministic given the config."""
    sizes = config.splits
    if config.source == "generated":
        try:
            domain = generate_domain(
                seed=config.seed,
                n_tasks=config.n_tasks,
                compat=config.compat or "fixed",
                n_airports=config.world.n_airports,
                n_flights=config.world.n_flights,
                n_users=config.world.n_users,
                n_reservations=config.world.n_reservations,
            )
        except ValueError as e:  # e.g. a world too small for the task families
            raise ConfigError(f"env.world / env.n_tasks: {e}") from e
    else:
        domain = load_tau_bench(config.data_dir, compat=config.compat or "tau_bench")
    splits = split_tasks(domain.tasks, sizes.covered_seen, sizes.uncovered_seen, sizes.unseen, seed=config.seed)
    splits[VALIDATION_SPLIT] = validation_tasks(domain, config, splits)
    return EnvBundle(domain=domain, splits=splits,
                     world_seed=config.seed if config.source == "generated" else None)


def validation_tasks(domain: AirlineDomain, config: EnvConfig, splits: dict[str, list[Task]]) -> list[Task]:
    """``config.splits.validation`` tasks of the training splits' families, trained on by no job.

    Generated source: new tasks from the same world (``continue_tasks``; not added to
    ``domain.tasks``, so nothing built from the task pool changes). τ-bench: a stratified
    draw out of ``splits["uncovered_seen"]``, which keeps the others (the test split and
    covered_seen, whose tasks have demonstrations, are untouched).
    """
    size = config.splits.validation or 0
    families = sorted({task.family for name in TRAIN_SPLITS for task in splits[name]})
    if size == 0:
        return []
    if not families:
        raise ConfigError("env.splits.validation needs training tasks to take its families from: "
                          "raise env.splits.covered_seen or env.splits.uncovered_seen")
    if config.source == "generated":
        tasks = continue_tasks(domain, config.seed, config.n_tasks, size, families)
    else:
        uncovered = splits["uncovered_seen"]
        if len(uncovered) <= size:
            raise ConfigError(
                f"env.splits.validation={size}: τ-bench validation tasks are held out of uncovered_seen, which "
                f"has {len(uncovered)}; lower env.splits.validation or raise env.splits.uncovered_seen")
        tasks = split_tasks(uncovered, size, 0, 0, seed=config.seed)["covered_seen"]
        splits["uncovered_seen"] = [task for task in uncovered if task not in tasks]
        for task in splits["uncovered_seen"]:
            task.split = "uncovered_seen"
    for task in tasks:
        task.split = VALIDATION_SPLIT
    return tasks


def make_env(bundle: EnvBundle, task: Task, config: EnvConfig, user_seed: int, max_steps: int = 30,
             user_client: ChatClient | None = None, abort_on_endpoint_error: bool = False) -> AirlineEnv:
    """One episode's environment with the configured user simulator.

    ``user_client``: the chat client of an LLM user (one serves every episode), e.g.
    ``agentgrpo.openai_client.llm_user_client(config.user)``; unused for scripted users.
    ``abort_on_endpoint_error``: a user request that fails for good ends the episode as
    ``aborted`` (NaN reward) instead of raising (see ``AirlineEnv``).
    """
    if config.user.kind == "scripted":
        user = ScriptedUser(task, seed=user_seed)
    elif user_client is None:
        raise ConfigError("env.user.kind=llm needs a chat client: pass user_client="
                          "agentgrpo.openai_client.llm_user_client(config.user) to make_env")
    else:
        user = LLMUser(task, user_client, temperature=config.user_temperature, seed=user_seed)
    return AirlineEnv(bundle.domain, task, user, max_steps=max_steps, abort_on_endpoint_error=abort_on_endpoint_error)


def split_families(bundle: EnvBundle) -> dict[str, list[str]]:
    """Families of each split as held-out draws label them, from the training splits of ``bundle``.

    covered_seen: families of the covered_seen tasks (SFT's demonstrations); uncovered_seen:
    families of the other training tasks that have no demonstration; unseen: families in no
    training split; validation: every training family. The seed's splits are task-level (a
    family can be in all three), so with the default sizes (16/24 over 23 families) every
    family is trained on and the held-out unseen split is empty; smaller training splits
    (e.g. 8/8) leave families out of training.
    """
    covered = {task.family for task in bundle.splits["covered_seen"]}
    trained = covered | {task.family for task in bundle.splits["uncovered_seen"]}
    return {"covered_seen": sorted(covered), "uncovered_seen": sorted(trained - covered),
            "unseen": sorted(set(FAMILY_NAMES) - trained), VALIDATION_SPLIT: sorted(trained)}


def training_world_seed(seed: int, world: int) -> int:
    """Seed of training world ``world`` of ``env.seed`` ``seed``: world 0 is ``seed``'s own."""
    return seed if world == 0 else TRAIN_WORLD_SEED_BASE + HELDOUT_WORLDS_PER_SEED * seed + world


def build_training_worlds(config: EnvConfig, training: EnvBundle | None = None) -> list[EnvBundle]:
    """``config.train_worlds`` worlds to train in: world 0 is ``build_env(config)`` (``training``
    if given); each other world (seed ``training_world_seed``) adds ``HELDOUT_TASKS_PER_FAMILY``
    verified tasks of every training family, labelled covered_seen or uncovered_seen as
    ``split_families`` of world 0 labels their family. Tasks of families no training split
    holds are left out, and only world 0 has unseen and validation tasks, so the test and
    validation sets do not change with ``train_worlds``. Training on many worlds is what lets a
    policy learn to read ids it has never seen instead of memorising one world's."""
    base = training or build_env(config)
    if config.train_worlds <= 1:
        return [base]
    families = split_families(base)
    bundles = [base]
    for world in range(1, config.train_worlds):
        world_seed = training_world_seed(config.seed, world)
        domain = _world_domain(config, world_seed, "training")
        splits: dict[str, list[Task]] = {name: [] for name in (*SPLIT_NAMES, VALIDATION_SPLIT)}
        for task in domain.tasks:
            for name in TRAIN_SPLITS:
                if task.family in families[name]:
                    task.split = name
                    splits[name].append(task)
        bundles.append(EnvBundle(domain=domain, splits=splits, world_seed=world_seed))
    return bundles


def heldout_world_seed(split: str, seed: int, world: int) -> int:
    """Seed of held-out world ``world`` for ``split``: validation worlds are apart from test worlds."""
    purpose = VALIDATION_SPLIT if split == VALIDATION_SPLIT else "test"
    return HELDOUT_SEED_BASE[purpose] + HELDOUT_WORLDS_PER_SEED * seed + world


def build_heldout(config: EnvConfig, split_names: Sequence[str], tasks_per_split: int, seed: int = 0,
                  training: EnvBundle | None = None) -> list[EnvBundle]:
    """``tasks_per_split`` fresh tasks for each of ``split_names``, from held-out worlds.

    Worlds have ``config.world``'s sizes and seeds ``heldout_world_seed`` (never a training
    seed); each gives ``HELDOUT_TASKS_PER_FAMILY`` verified tasks of every family, and each
    split takes, world after world, the tasks of its families (``split_families`` of the
    training bundle, ``build_env(config)`` unless given) until it has ``tasks_per_split``.
    A larger set starts with the tasks of a smaller one (same seed). A split whose families
    are all elsewhere stays empty. Returns one bundle per world used, its ``splits`` holding
    that world's share of each split; nothing here depends on the training pool's tasks
    but their families.
    """
    require(config.source == "generated", "tasks_per_split", tasks_per_split,
            "held-out tasks need env.source=generated (τ-bench's task set is fixed); set tasks_per_split=0")
    require(config.seed < HELDOUT_SEED_BASE["test"], "env.seed", config.seed,
            f"must be < {HELDOUT_SEED_BASE['test']} when drawing held-out tasks (their worlds' seeds start there)")
    require(0 <= seed < (HELDOUT_SEED_BASE["validation"] - HELDOUT_SEED_BASE["test"]) // HELDOUT_WORLDS_PER_SEED,
            "heldout_seed", seed, "must be in [0, 100000)")
    families = split_families(training or build_env(config))
    unknown = [name for name in split_names if name not in families]
    require(not unknown, "splits", list(split_names), f"must be among {list(families)}")
    wanted = {name: tasks_per_split if families[name] else 0 for name in split_names}
    counts = dict.fromkeys(split_names, 0)
    bundles: list[EnvBundle] = []
    for purpose in ("test", VALIDATION_SPLIT):
        names = [n for n in split_names if (n == VALIDATION_SPLIT) == (purpose == VALIDATION_SPLIT)]
        world = 0
        while any(counts[n] < wanted[n] for n in names):
            require(world < HELDOUT_WORLDS_PER_SEED, "tasks_per_split", tasks_per_split,
                    "is more than the held-out worlds of one seed hold")
            world_seed = heldout_world_seed(names[0], seed, world)
            domain = _world_domain(config, world_seed, "held-out")
            splits: dict[str, list[Task]] = {n: [] for n in names}
            for task in domain.tasks:
                for name in names:
                    if task.family in families[name] and counts[name] < wanted[name]:
                        task.split = name
                        splits[name].append(task)
                        counts[name] += 1
            bundles.append(EnvBundle(domain=domain, splits=splits, world_seed=world_seed))
            world += 1
    return bundles


def _world_domain(config: EnvConfig, world_seed: int, kind: str) -> AirlineDomain:
    """One generated world of ``config.world``'s sizes with ``HELDOUT_TASKS_PER_FAMILY`` verified
    tasks of every family (a held-out or an extra training world)."""
    try:
        return generate_domain(seed=world_seed, n_tasks=HELDOUT_TASKS_PER_FAMILY * len(FAMILY_NAMES),
                               compat=config.compat or "fixed", n_airports=config.world.n_airports,
                               n_flights=config.world.n_flights, n_users=config.world.n_users,
                               n_reservations=config.world.n_reservations)
    except ValueError as e:  # a world too small for a family
        raise ConfigError(f"env.world ({kind} world {world_seed}): {e}") from e
