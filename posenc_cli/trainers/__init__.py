"""Stage 3b, the training frameworks: the settings each one takes for a request, what each computes when it trains
a model, and how an exported checkpoint is read back (``audit``)."""
