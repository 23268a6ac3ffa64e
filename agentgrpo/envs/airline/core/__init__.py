"""The airline domain core: τ-bench's database, tools, policy text, grader and episode API.

``db`` (immutable base + copy-on-write state, incremental hashing), ``schema`` (tool
schemas from typed methods, argument validation), ``tools`` (the 14 τ-bench tools: those
that change nothing in ``read_tools``, the writes in ``write_tools``, on ``tool_base``),
``calculator``, ``policy`` (the text agents see and its rules as functions), ``grader``
(database hash + outputs), ``domain`` (everything in one object), ``environment``
(``AirlineEnv``, ``run_episode``) and ``tau_bench`` (the τ-bench data loader). Nothing
here knows how tasks are generated or how users are simulated.
"""
