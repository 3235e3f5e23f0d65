"""``posenc eval``'s core (standard library only): plans, server probing, resumable runs and their reports.

:mod:`~posenc_cli.evaluation.plan` (what to measure), :mod:`~posenc_cli.evaluation.probe` (what the server can do),
:mod:`~posenc_cli.evaluation.tokens` (exact token counts), :mod:`~posenc_cli.evaluation.run` (the results file) and
:mod:`~posenc_cli.evaluation.report` (verdicts); :mod:`~posenc_cli.evaluation.workflows` runs each ``posenc eval``
command from what it was asked. The HTTP client is :mod:`posenc_cli.evaluation.client`; prompts come
from
:mod:`posenc_cli.evaluation.templates`.
"""

# Limits of a plan, here (not in plan.py, which loads yaml) so the CLI's help texts can state them cheaply.
#: Longest prompt length: served windows reach 10M (Llama 4 Scout). Prompts are built locally and linearly: a 4M-token
#: needle prompt took 0.75 s on one core, so at 16M one row of 5 depths x 4 trials is about a minute of local work.
MAX_EVAL_LENGTH = 1 << 24
MIN_EVAL_LENGTH = 8  # a template's fixed text needs a few tokens
MAX_TRIALS = 1000
#: RULER's tasks shipped (``rules/templates/NAME.yaml``), lm-eval's names; ``ruler`` is the set of all of them.
TASKS = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
         "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
