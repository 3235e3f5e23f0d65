"""``posenc plot``'s pictures: the data drawn (:mod:`.data`, numpy), the matplotlib figures (:mod:`.figures`) and the
terminal rendering (:mod:`.terminal`, rich), pure functions with no I/O; and each plot kind from its options to the
file written or the terminal rendering (:mod:`.drawings`)."""
