"""Stage 4, recommending: the decision rules, the staged plan a budget buys, ``posenc pick`` itself and its plan in
one trainer's format."""
