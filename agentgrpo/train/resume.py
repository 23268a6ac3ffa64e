"""What a resumed run may change: the checkpoint's resolved config against the new one.

``agentgrpo train --resume`` and ``agentgrpo sft --resume`` (``resume_checkpoint``) continue a
run only if it would compute the same thing:
every key of the resolved config (``agentgrpo.config.to_dict``) must equal the value
stored in the checkpoint's ``trainer_state.json``, except the keys of
``RESUME_MAY_CHANGE``. Anything else (seed, experiment, learning rate, ...) is refused
with a ``ResumeConfigError`` listing old → new values, unless ``--force``.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentgrpo.config import ConfigError, differing_keys, flatten_keys, to_dict
from agentgrpo.train.checkpoint import latest_checkpoint, load_trainer_state, remove_stale

RESUME_MAY_CHANGE: tuple[str, ...] = (
    "run_dir",                   # where the run lives: it may have been moved
    "logging.*",                 # trackers, project name, progress bar
    "progress",                  # SFT's progress bar
    "trainer.steps",             # extend or shorten the run (refused under lr_schedule=cosine,
                                 # whose decay horizon is the number of steps)
    "trainer.save_every",        # when checkpoints are written ...
    "trainer.keep_last",         # ... and how many are kept
    "trainer.val_every",         # when validation runs (it does not touch the training state)
    "trainer.lld_diagnostic",    # an extra no-grad forward pass whose result is only logged
    "trainer.micro_batch_size",  # gradient accumulation: the same gradient (global denominators),
    "trainer.compile",           # and torch.compile: the same math, both up to float rounding
    "trainer.shared_rollouts_dir",  # where first rollouts are shared: the same bits either way
    "policy.device",             # where the model runs, bf16 autocast and activation recomputation:
    "policy.autocast",           # the same math up to float rounding (a run may move to a GPU)
    "policy.cpu_autocast",
    "policy.gradient_checkpointing",
)
"""Config keys (``fnmatch`` patterns over dotted names) a resume may change: they decide
how long the run is, what is logged or saved, and how the same computation is executed,
never what is computed."""

CHANGED_DEFAULTS: dict[str, Any] = {
    "trainer.skip_zero_grad_steps": False,  # skipping zero-gradient AdamW steps became the default
}
"""Keys whose schema default changed, with the value runs had before. A checkpoint that records
that value (or lacks the key) keeps it on resume when the new config holds the new default
(``keep_changed_defaults``), so the resumed run computes what the interrupted one did instead
of being refused; a missing key is compared as that value, not as the new default."""


class ResumeConfigError(ConfigError):
    """``--resume`` with a config that differs from the checkpoint's in keys that matter."""


class NothingToResumeError(ResumeConfigError):
    """``--resume`` on a finished run (``final/``) that kept no checkpoint: a fresh start would
    replace its config.yaml, init/ and metrics.jsonl, so it is refused instead."""


def resume_checkpoint(run_dir: Path, config: Any, *, force: bool = False) -> Path | None:
    """The checkpoint a resumed run continues from: the latest of ``run_dir`` (None if it has
    none), once a killed save's leftovers are removed (``remove_stale``), the changed defaults
    kept (``keep_changed_defaults``: ``config``, a config object, is changed in place) and the
    config checked against the checkpoint's (``check_resume_config``; ``force`` only warns).

    A run_dir with no checkpoint starts over (a run killed before its first save), unless it
    holds a finished run (``final/``): that is refused (``NothingToResumeError``), since the
    fresh start would overwrite the finished run's record; ``force`` starts over with a warning."""
    remove_stale(run_dir)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None and (Path(run_dir) / "final").is_dir():
        problem = (f"nothing to resume in {run_dir}: it holds a finished run (final/) and no checkpoint, "
                   f"and starting over would replace its config.yaml and metrics.jsonl")
        if not force:
            raise NothingToResumeError(f"{problem}; use a new run_dir, or pass --force to start over there")
        warnings.warn(f"{problem}; starting over (--force)", stacklevel=2)
    if checkpoint is not None:
        defaults = to_dict(type(config)())
        keep_changed_defaults(checkpoint, config, defaults)
        check_resume_config(checkpoint, run_dir, to_dict(config), force=force, defaults=defaults)
    return checkpoint


def check_resume_config(checkpoint: Path, run_dir: Path, config: dict[str, Any], *,
                        force: bool = False, defaults: dict[str, Any] | None = None) -> dict[str, tuple[Any, Any]]:
    """Compare ``config`` (resolved, plain data) with the one ``checkpoint`` was saved with.

    The saved config is ``trainer_state.json``'s ``"config"`` (``run_dir/config.yaml`` for
    checkpoints without one). Returns the differences outside ``RESUME_MAY_CHANGE``
    (dotted key → (old, new)); raises ``ResumeConfigError`` if there are any, or if no
    saved config is found, unless ``force`` (then it only warns). ``defaults``: the schema's
    defaults, for keys added since the checkpoint was saved (see ``config_differences``).
    """
    saved = load_trainer_state(checkpoint).get("config")
    if saved is None and (run_dir / "config.yaml").is_file():
        saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True)
    differences: dict[str, tuple[Any, Any]] = {}
    if saved is None:
        problem = f"cannot resume from {checkpoint}: it records no config to compare with"
    else:
        differences = config_differences(saved, config, defaults)
        if not differences:
            return differences
        listed = ", ".join(f"{key} ({old!r} → {new!r})" for key, (old, new) in differences.items())
        problem = f"cannot resume from {checkpoint}: the config differs from the checkpoint's in {listed}"
    if not force:
        raise ResumeConfigError(f"{problem}; start a new run_dir, or pass --force to resume anyway "
                                f"(a resume may change only {', '.join(RESUME_MAY_CHANGE)})")
    warnings.warn(f"{problem}; resuming anyway (--force)", stacklevel=2)
    return differences


def config_differences(saved: dict[str, Any], new: dict[str, Any],
                       defaults: dict[str, Any] | None = None) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two resolved configs, outside the allow-list.

    A key the saved config lacks is no difference when the new value is the schema's default
    (``defaults``): a setting added after the checkpoint was written defaults to what the code
    did before it, so the resumed run computes the same thing.
    """
    may_change = list(RESUME_MAY_CHANGE)
    if "cosine" in (flatten_keys(saved).get("trainer.lr_schedule"), flatten_keys(new).get("trainer.lr_schedule")):
        may_change.remove("trainer.steps")
    return differing_keys(saved, new, may_change=may_change, defaults=defaults, assumed=CHANGED_DEFAULTS)


def keep_changed_defaults(checkpoint: Path, config: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """Set each ``CHANGED_DEFAULTS`` key of ``config`` (a config object, changed in place) that holds
    the schema's new default back to the checkpoint's value (the previous default where it lacks
    the key); returns what was kept, and warns about it. Keys ``config``'s schema lacks (another
    trainer's) are left alone."""
    saved = load_trainer_state(checkpoint).get("config")
    if saved is None:
        return {}
    saved_flat, default_flat = flatten_keys(saved), flatten_keys(defaults)
    kept = {}
    for key, previous in CHANGED_DEFAULTS.items():
        if key not in default_flat:
            continue
        *path, name = key.split(".")
        section = config
        for part in path:
            section = getattr(section, part)
        old = saved_flat.get(key, previous)
        if getattr(section, name) == default_flat.get(key) and old != getattr(section, name):
            setattr(section, name, old)
            kept[key] = old
    if kept:
        listed = ", ".join(f"{key}={value!r}" for key, value in kept.items())
        warnings.warn(f"resuming {checkpoint} with the checkpoint's {listed} (the default has changed since; "
                      "a new run_dir gets the new default)", stacklevel=2)
    return kept

