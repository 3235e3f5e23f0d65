"""The data and figures of ``posenc plot``: pure functions, no I/O (numpy; matplotlib and rich inside the functions
that draw)."""
