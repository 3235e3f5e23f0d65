"""How MLX-LM 0.32.2's caches grow (``mlx_lm/models/cache.py``), in cells (token slots), for the calls
``mlx_lm.generate``'s ``generate_step`` makes for a prompt (stdlib; :mod:`posenc_cli.engines.caches.mlx_lm` turns
the cells into bytes). Each class replays one cache class's buffer arithmetic; :func:`cells_after` runs the calls,
skipping whole cycles once a run of equal calls repeats a state, so a million-token prompt costs a few steps.
``tests/engines/test_memory_mlx_lm.py`` drives mlx-lm's own classes with the same calls."""

from __future__ import annotations

# framework fact: mlx_lm/models/cache.py KVCache.step = QuantizedKVCache.step = RotatingKVCache.step = 256
STEP = 256


def prompt_calls(tokens: int, prefill_step_size: int) -> list[tuple[int, int]]:
    """``generate_step``'s model calls for a prompt of ``tokens`` tokens, as (tokens per call, calls) runs: the first
    ``tokens - 1`` in calls of ``prefill_step_size``, then the last token alone."""
    if tokens <= 0:
        return []
    full, rest = divmod(tokens - 1, prefill_step_size)
    return [run for run in ((prefill_step_size, full), (rest, 1)) if run[0] and run[1]] + [(1, 1)]


class Growing:
    """``KVCache`` / ``QuantizedKVCache`` ``update_and_fetch``: (offset, cells)."""

    def __init__(self) -> None:
        self.offset = self.cells = 0

    def key(self) -> tuple[int, ...]:
        return (self.cells == 0, self.offset % STEP, self.cells - self.offset)

    def fields(self) -> tuple[int, ...]:
        return (self.offset, self.cells)

    def shift(self, delta: tuple[int, ...], times: int) -> None:
        self.offset += delta[0] * times
        self.cells += delta[1] * times

    def call(self, s: int) -> None:
        if self.cells == 0 or self.offset + s > self.cells:
            if self.cells and self.offset % STEP:
                self.cells = self.offset  # keys[..., :prev, :] before the concatenation
            self.cells += -(-s // STEP) * STEP
        self.offset += s


class Rotating:
    """``RotatingKVCache`` ``_update_concat`` (S > 1) and ``_update_in_place`` (S = 1): (offset, cells, _idx)."""

    def __init__(self, max_size: int, keep: int) -> None:
        self.max_size, self.keep = max_size, keep
        self.offset = self.cells = self.idx = 0

    def key(self) -> tuple[int, ...]:
        # once full and past its cells, the offset and _idx no longer change the cells (_idx < offset always)
        if self.cells >= self.max_size and self.offset > self.cells:
            return (self.cells, -1, -1)
        return (self.cells, self.idx, self.offset)

    def fields(self) -> tuple[int, ...]:
        return (self.offset,)

    def shift(self, delta: tuple[int, ...], times: int) -> None:
        self.offset += delta[0] * times

    def coast(self, s: int, calls: int) -> int:
        """Calls before the buffer first fills, taken at once: single tokens into room it already has, or
        concatenations that trim nothing."""
        if not self.cells or self.cells >= self.max_size or self.idx != self.offset:
            return 0
        if s == 1:
            taken = max(0, min(calls, self.cells - self.offset))
        else:
            if self.cells != self.offset:
                return 0
            taken = min(calls, (self.max_size - 1 - self.cells) // s + 1)
            self.cells += taken * s
        self.offset += taken * s
        self.idx += taken * s
        return taken

    def call(self, s: int) -> None:
        if s > 1:
            if self.cells:
                ordered = self.cells if self.idx == self.cells or self.idx < self.offset else self.idx
                self.cells = min(ordered, self.max_size - 1) + s  # _trim keeps max_size - 1, then appends s
            else:
                self.cells = s
            self.idx = self.cells
        else:
            if self.cells == 0 or (self.offset >= self.cells and self.cells < self.max_size):
                self.cells += min(STEP, self.max_size - self.offset)
                self.idx = self.offset
            if self.cells > self.max_size:
                self.cells = self.idx = self.max_size
            if self.idx == self.max_size:
                self.idx = self.keep
            self.idx += 1
        self.offset += s


class Chunked:
    """``ChunkedKVCache``: ``maybe_trim_front`` before each call (``llama4.py``), then ``KVCache``'s growth:
    (offset, start_position, cells)."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.offset = self.start = self.cells = 0

    def key(self) -> tuple[int, ...]:
        return (self.cells, self.offset - self.start)

    def fields(self) -> tuple[int, ...]:
        return (self.offset, self.start)

    def shift(self, delta: tuple[int, ...], times: int) -> None:
        self.offset += delta[0] * times
        self.start += delta[1] * times

    def call(self, s: int) -> None:
        if self.cells and self.offset - self.start > self.chunk:
            self.start = self.offset - self.chunk
            self.cells = self.chunk  # keys[..., trim:valid, :]
        prev = self.offset - self.start
        if self.cells == 0 or prev + s > self.cells:
            if self.cells and prev % STEP:
                self.cells = prev
            self.cells += -(-s // STEP) * STEP
        self.offset += s


Sim = Growing | Rotating | Chunked


def cells_after(sim: Sim, calls: list[tuple[int, int]]) -> int:
    """The cells ``sim`` holds after the calls; a run of equal calls skips whole cycles once its state (relative to
    the offset) repeats, so a million-token prompt costs a few steps."""
    for size, count in calls:
        seen: dict[tuple[int, ...], tuple[int, tuple[int, ...]]] = {}
        done = 0
        while done < count:
            key = sim.key()
            if key in seen:
                first, before = seen.pop(key)
                period = done - first
                times = (count - done) // period
                sim.shift(tuple(a - b for a, b in zip(sim.fields(), before, strict=True)), times)
                done += times * period
                seen.clear()
                if done >= count:
                    break
            if isinstance(sim, Rotating) and (taken := sim.coast(size, count - done)):
                done += taken
                continue
            seen[key] = (done, sim.fields())
            sim.call(size)
            done += 1
    return sim.cells
