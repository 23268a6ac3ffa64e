"""Simulated participants of airline dialogues: the scripted user's side and the oracle agent.

``scenario`` (a task's structured goal), ``dialogue`` (reading agent messages: entities,
dialogue acts), ``user_script`` (what the scripted user says; the user itself is
``agentgrpo.envs.user_sim.ScriptedUser``), ``oracle`` (the teacher agent's machinery) and
``plans`` (its dialogue per intent; ``plans.oracle_agent`` builds the teacher for a task),
with the plans by task family in ``plans_book``, ``plans_cancel`` and ``plans_modify`` on
the shared wording and steps of ``plans_common``.
"""
