"""Generated airline tasks: a seeded world (``world``) and the task families over it.

``generate`` holds ``generate_domain`` and ``split_tasks``; the families live in
``families_book``, ``families_cancel`` and ``families_modify`` on the shared pieces of
``common``. Each task carries gold actions, outputs, an instruction for LLM users and a
structured ``Scenario`` (``simulation.scenario``) for the scripted user and the oracle.
"""
