"""``posenc plot``'s pictures, pure functions with no I/O: the data drawn (:mod:`.data`, numpy), the matplotlib
figures (:mod:`.figures`) and the terminal rendering (:mod:`.terminal`, rich)."""
