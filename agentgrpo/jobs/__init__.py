"""Jobs that run whole pipelines: ``quickstart`` (SFT → GRPO → evaluation → report) and
``ablate`` (every variant from one SFT checkpoint). They call the trainers and the
evaluator, and ``agentgrpo.report`` only to render tables and plots."""
