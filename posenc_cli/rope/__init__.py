"""Stage 1, the math of positions: no model, no file, no command.

``scaling`` (a context-extension request and the one rope dict it means), ``frequencies`` (inverse frequencies for
every rope type, exactly as transformers 5.x), ``attention_factors`` (cos/sin magnitudes), ``windows`` (the window a
rope dict serves), ``encodings`` (sinusoidal, RoPE in both layouts, ALiBi), ``slopes``, ``precision`` and ``verify``
(numeric proofs). ``scaling``, ``attention_factors``, ``windows`` and ``slopes`` are stdlib; the rest load numpy.
"""
