"""Engines run by the user's installed package (``posenc check --installed``): one module per engine."""
