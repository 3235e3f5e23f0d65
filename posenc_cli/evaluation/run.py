"""Run a plan against a server: an append-only results file plus a manifest, resumable, safe to interrupt.

A run folder holds ``manifest.json`` (the plan, its fingerprint, the server's capabilities; written atomically
once, before the first request) and ``results.jsonl`` (one JSON line per finished request, written and flushed
to disk as it lands, never rewritten). A rerun with the same folder reads both, refuses a different plan, model,
token counter or server setup, and sends only the cells without a line, plus those the server refused; a line cut
short by a crash is ignored and its cell is sent again.

A cell of length ``L`` uses ``L`` tokens of context: its prompt is ``L - max_tokens`` tokens (``L - 1`` for a loss
request, which generates one), so a server whose window is exactly the plan's longest length takes every cell.
Each prompt is built to its exact token length with the counter (server tokenize or a local
tokenizer) and the line records both that count and the server's ``usage.prompt_tokens``: a cell whose lengths
disagree is kept, flagged, and left out of the pass rates by the report.

With ``api`` "chat" (``eval run --api chat``) the retrieval prompts go to ``/v1/chat/completions`` as one user
message and their length counts the chat template's tokens: the counter's count plus the template's tokens the probe
measured, so a cell of length ``L`` is ``L`` tokens of context as the server counts them with its template (checked
per cell against ``usage.prompt_tokens``, as on completions). Loss requests stay raw completions.

Several requests may be in flight (``concurrency``, one thread each, one shared :class:`Client`); lines are still
written in the order of the plan's cells: a finished cell waits until every cell before it is written, so a run's
file has the same order whatever the concurrency, and an interrupted run has written a prefix of its cells (the
cells that had finished after the first missing one are sent again, never duplicated or lost). At most
:data:`WINDOW` x ``concurrency`` cells are sent ahead of the first unwritten one.

A :class:`Runner` does not lock its folder: ``posenc eval run`` holds :func:`posenc_cli.folderlock.hold` around
``prepare`` and ``run``, so two processes never send and append the same cells.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.evaluation.client import Client, Completion, Refused, ServerError
from posenc_cli.evaluation.losspolicy import LossChoice, choose
from posenc_cli.evaluation.plan import Cell, Plan
from posenc_cli.evaluation.probe import Capabilities
from posenc_cli.evaluation.ruler import RulerPrompt, TaskSet
from posenc_cli.evaluation.templates import Prompt, Template, build_prompt
from posenc_cli.files import atomic_write_text, dumps_config, loads_tagged

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
FORMAT = 1
WINDOW = 4  # cells sent ahead of the first unwritten one, per request in flight


class PlanMismatch(PosencError):
    """The run folder holds results of another plan or model."""


def read_results(folder: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of ``results.jsonl`` (a torn last line from a crash is skipped)."""
    path = folder / RESULTS
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                record = loads_tagged(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "cell" in record:
                yield record


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        data = loads_tagged(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PosencError(f"{folder}: not a run folder (no {MANIFEST})") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise PosencError(f"{path}: cannot read it ({exc.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PosencError(f"{path}: not a posenc eval manifest (format {FORMAT})")
    return data


def cell_prompt(template: Template | TaskSet, cell: Cell, count: Callable[[str], int]) -> Prompt | RulerPrompt:
    """The prompt of one cell: ``cell.length`` tokens of context less the tokens the server may generate.

    A task cell (RULER) is its task's prompt; a loss cell of a task-set plan uses the first task's."""
    if isinstance(template, TaskSet):
        task = template.task(cell.task) if cell.task else template.tasks[0]
        generated = task.max_tokens if cell.kind == "task" else 1
        return task.build(length=cell.length - generated, seed=cell.seed, count=count)
    generated = template.max_tokens if cell.kind == "needle" else 1
    return build_prompt(template, length=cell.length - generated, depth=cell.depth, seed=cell.seed, count=count)


@dataclass
class Progress:
    done: int
    total: int
    requests: int
    passed: int
    last: dict[str, Any] | None


class Runner:
    def __init__(self, client: Client, caps: Capabilities, plan: Plan, folder: Path,
                 count: Callable[[str], int], *, concurrency: int = 1, label: str | None = None,
                 counter: str = "server", loss: LossChoice | None = None) -> None:
        if not 1 <= concurrency <= 256:
            raise PosencError(f"--concurrency {concurrency}: allowed 1 to 256")
        self.client, self.caps, self.plan, self.folder = client, caps, plan, folder
        self.loss = loss if loss is not None else choose(plan, caps)
        self.count, self.concurrency, self.label, self.counter = count, concurrency, label, counter
        self._lock = threading.Lock()
        offset = (caps.chat_offset or 0) if caps.api == "chat" else 0
        # what the server counts for a retrieval prompt: its text, plus the chat template around it
        self.ask_count: Callable[[str], int] = (lambda text: count(text) + offset) if offset else count

    def _count_for(self, kind: str) -> Callable[[str], int]:
        return self.count if kind == "loss" else self.ask_count

    def _ask(self, text: str, max_tokens: int) -> Completion:
        """One retrieval request, greedy, through the run's API; streamed where the probe found the usage reported
        when streaming (its time to first token recorded)."""
        if self.caps.api == "chat":
            return self.client.chat(self.caps.model, text, max_tokens=max_tokens)
        if self.caps.api == "ollama":  # the window the probe found: num_ctx, within the GGUF's
            return self.client.generate(self.caps.model, text, max_tokens=max_tokens,
                                        num_ctx=self.caps.served_context or max(self.plan.lengths))
        return self.client.complete(self.caps.model, text, max_tokens=max_tokens,
                                    stream=self.caps.first_token == "streamed")

    def prepare(self) -> tuple[list[Cell], int]:
        """Write or check the manifest; the cells still to run and how many are already done."""
        template, shortest = self.plan.template, min(self.plan.lengths)
        if isinstance(template, Template):
            fixed = template.fixed_tokens(self.ask_count) - template.max_tokens
            if shortest - template.max_tokens < fixed:
                raise PosencError(f"length {shortest} is too short for template {template.name!r}: its fixed text "
                                  f"is {fixed} tokens and the answer needs {template.max_tokens} (lengths from "
                                  f"{fixed + template.max_tokens})")
        # each task's prompt at the shortest length, before any request (TaskError says what is too short)
        for task in self.plan.task_set.tasks if self.plan.task_set is not None else ():
            task.build(length=shortest - task.max_tokens, seed=0, count=self.ask_count)
        manifest = {"format": FORMAT, "fingerprint": self.plan.fingerprint(), "plan": self.plan.as_dict(),
                    "model": self.caps.model, "server": self.caps.as_dict(), "counter": self.counter,
                    "loss": self.loss.as_dict(), "label": self.label, "api": self.caps.api,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            if (self.folder / MANIFEST).exists():
                self._check_same_run(read_manifest(self.folder), manifest)
            else:
                self.folder.mkdir(parents=True, exist_ok=True)
                atomic_write_text(self.folder / MANIFEST, dumps_config(manifest) + "\n")
            results = self.folder / RESULTS
            if results.is_file() and results.stat().st_size:
                with open(results, "rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    torn = fh.read(1) != b"\n"
                if torn:  # end the line a crash cut short, so the next record starts a line of its own
                    with open(results, "ab") as fh:
                        fh.write(b"\n")
        except OSError as exc:
            raise PosencError(f"--out {self.folder}: cannot write there ({exc.strerror or exc.__class__.__name__})"
                              ) from None
        finished = {r["cell"] for r in read_results(self.folder) if "refused" not in r}
        cells = self.plan.cells(with_loss=self.loss.measured, loss_lengths=self.loss.lengths)
        todo = [c for c in cells if c.key not in finished]
        return todo, len(cells) - len(todo)

    def _check_same_run(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """A rerun resumes only the same plan, model, tokenizer and server setup (what the server shows of it)."""
        if old.get("fingerprint") != new["fingerprint"]:
            raise PlanMismatch(f"{self.folder} holds results of another plan (fingerprint {old.get('fingerprint')}, "
                               f"this plan {new['fingerprint']}); use a new --out folder")
        before, now = old.get("server", {}), new["server"]
        checks = [("model", old.get("model"), new["model"]), ("token counter", old.get("counter"), new["counter"]),
                  ("engine", before.get("engine"), now["engine"]),
                  ("API", old.get("api", "completions"), new["api"]),
                  ("chat template tokens", before.get("chat_offset"), now["chat_offset"]),
                  ("served context", before.get("served_context"), now["served_context"]),
                  ("prompt log-probabilities", before.get("prompt_logprobs"), now["prompt_logprobs"])]
        if "loss" in old:  # manifests before the loss choice have none to compare
            checks.append(("loss requests at", old["loss"].get("lengths"), new["loss"]["lengths"]))
        for what, was, is_now in checks:
            if was != is_now:
                raise PlanMismatch(f"{self.folder} holds results of another setup ({what} {was!r}, now {is_now!r}); "
                                   "use a new --out folder")

    def _append(self, record: dict[str, Any]) -> None:
        line = dumps_config(record, indent=None, separators=(",", ":")) + "\n"
        try:
            with self._lock, open(self.folder / RESULTS, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise PosencError(f"{self.folder / RESULTS}: cannot append ({exc.strerror or exc.__class__.__name__}); "
                              "the lines written so far are kept") from None

    def run_cell(self, cell: Cell) -> dict[str, Any]:
        # a task cell's prompt comes from the plan's tasks; a needle or loss cell's from its template
        template = self.plan.task_set if cell.kind == "task" and self.plan.task_set is not None else \
            self.plan.template
        started = time.perf_counter()
        sent = self.client.thread_requests
        prompt = cell_prompt(template, cell, self._count_for(cell.kind))
        record: dict[str, Any] = {"cell": cell.key, "kind": cell.kind, "length": cell.length, "depth": cell.depth,
                                  "trial": cell.trial, "tokens": prompt.tokens}
        if isinstance(prompt, Prompt):
            record["reached_depth"] = round(prompt.depth, 4)
        answer: Completion | None = None
        try:
            if isinstance(prompt, RulerPrompt) and isinstance(template, TaskSet) and cell.kind == "task":
                task = template.task(cell.task)
                answer = self._ask(prompt.text, task.max_tokens)
                score = task.score(prompt.answers, answer.text)
                record |= {"task": cell.task, "answers": list(prompt.answers), "reply": answer.text,
                           "score": score, "passed": score == 1.0}
            elif cell.kind == "needle" and isinstance(prompt, Prompt) and isinstance(template, Template):
                answer = self._ask(prompt.text, template.max_tokens)
                record |= {"key": prompt.key, "reply": answer.text,
                           "passed": template.score(prompt.key, answer.text)}
            elif self.caps.prompt_logprobs == "sglang":
                values = self.client.sglang_prompt_logprobs(prompt.text)
                record |= {"served_tokens": len(values), "logprobs": values}
            else:
                answer = self.client.complete(self.caps.model, prompt.text, max_tokens=1, echo_logprobs=True)
                if answer.prompt_logprobs is None:
                    raise ServerError(f"{self.client.base_url}: the probe found prompt logprobs, this answer has none")
                record["logprobs"] = [None if v is None else round(v, 5) for v in answer.prompt_logprobs]
        except Refused as exc:
            # the server understood and will not serve it (a prompt past its context): a result, not a crash;
            # a rerun sends the cell again
            record |= {"refused": str(exc), "passed": False} if cell.kind in ("needle", "task") else \
                {"refused": str(exc)}
            if cell.kind == "task":
                record |= {"task": cell.task, "score": 0.0}
        if answer is not None:
            record["served_tokens"] = answer.prompt_tokens
            if answer.first_token_seconds is not None:
                # with the requests in flight beside it: one queued behind others waits longer (a resumed run may
                # use another --concurrency, hence per line)
                record |= {"first_token_seconds": round(answer.first_token_seconds, 4),
                           "in_flight": self.concurrency}
        served = record.get("served_tokens")
        record["length_ok"] = served is None or served == prompt.tokens
        record |= {"seconds": round(time.perf_counter() - started, 4), "requests": self.client.thread_requests - sent}
        return record

    def run(self, todo: list[Cell], on_progress: Callable[[Progress], None] | None = None) -> Progress:
        """Run ``todo``, ``concurrency`` requests at a time, writing each line in ``todo``'s order (see the module).

        A request that fails after its retries stops the run: the lines before the first unfinished cell stay on
        disk, the cells after it are sent again by a rerun. A prompt the server refuses (4xx) is recorded, not
        raised: see :meth:`run_cell`."""
        state = Progress(0, len(todo), 0, 0, None)
        finished: dict[int, dict[str, Any]] = {}  # index in todo -> record, until every earlier cell is written
        written = submitted = 0
        failure: tuple[int, BaseException] | None = None
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            pending: dict[Future[dict[str, Any]], int] = {}
            while True:
                while (failure is None and submitted < len(todo) and len(pending) < self.concurrency
                       and submitted - written < WINDOW * self.concurrency):
                    pending[pool.submit(self.run_cell, todo[submitted])] = submitted
                    submitted += 1
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = pending.pop(future)
                    exc = future.exception()
                    if exc is None:
                        finished[index] = future.result()
                    elif failure is None or index < failure[0]:
                        failure = (index, exc)
                while written in finished and (failure is None or written < failure[0]):
                    record = finished.pop(written)
                    self._append(record)
                    written += 1
                    state.done += 1
                    state.passed += bool(record.get("passed"))
                    state.last = record
                    state.requests = self.client.requests
                    if on_progress is not None:
                        on_progress(state)
        if failure is not None:
            raise failure[1]
        return state
