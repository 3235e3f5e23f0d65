"""``posenc eval``'s core (standard library only): plans, server probing, resumable runs and their reports.

:mod:`~posenc_cli.evaluation.plan` (what to measure), :mod:`~posenc_cli.evaluation.probe` (what the server can do),
:mod:`~posenc_cli.evaluation.tokens` (exact token counts), :mod:`~posenc_cli.evaluation.run` (the results file) and
:mod:`~posenc_cli.evaluation.report` (verdicts). The HTTP client is :mod:`posenc_cli.serving`; prompts come from
:mod:`posenc_cli.evaltemplate`.
"""
